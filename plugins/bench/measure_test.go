package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// warmUp rounds of each subject are run, untimed, before the timed ones:
// they fault the binaries into the page cache and create the state files.
const warmUp = 5

// call execs bin with exactly env and stdin, as a runtime does, and fails
// unless it exits 0. Stdout is returned either way: it holds the error
// document of a plugin that failed.
func call(ctx context.Context, bin string, env []string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env, cmd.Stdin = env, bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %v: %w: %s %s", filepath.Base(bin), env, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// roundTrip is one ADD+DEL (or the floor's two execs) for round i; rounds
// use distinct ids so that a DEL that silently failed shows up later.
type roundTrip func(ctx context.Context, i int) error

type kind int

const (
	kindFloor kind = iota
	// kindStateFloor is the floor plus the state rule: lock, read, and the
	// fsynced rename every state change costs.
	kindStateFloor
	kindHostLocal
	kindPlugin
)

// subject is one line of the round-trip table before it is measured.
type subject struct {
	name string
	kind kind
	bin  string
	trip roundTrip
}

// row is one line of the round-trip table.
type row struct {
	subject
	p50, p90 time.Duration
	cpu      time.Duration // median CPU time of a round trip
	// stateLo and stateHi bound the x state floor ratio (ratioInterval).
	stateLo, stateHi float64
	sizeMiB          float64
	links            []string // grpc or client-go, if the build info lists them
}

// measure warms every subject up, then times n rounds of each, taking the
// subjects in turn within each round (see the package doc for why).
func measure(ctx context.Context, subjects []subject, n int) ([]row, error) {
	for _, s := range subjects {
		for i := range warmUp {
			if err := s.trip(ctx, -1-i); err != nil {
				return nil, fmt.Errorf("%s warm-up: %w", s.name, err)
			}
		}
	}
	progress("timing %d rounds of %d subjects, interleaved", n, len(subjects))
	d, cpu := make([][]time.Duration, len(subjects)), make([][]time.Duration, len(subjects))
	for i := range n {
		for j, s := range subjects {
			ts, err := timed(func() error { return s.trip(ctx, i) })
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", s.name, i, err)
			}
			d[j], cpu[j] = append(d[j], ts.wall), append(cpu[j], ts.cpu)
		}
	}
	return summarize(subjects, d, cpu)
}

// summarize turns each subject's durations and CPU times, in round order,
// into its row.
func summarize(subjects []subject, d, cpu [][]time.Duration) ([]row, error) {
	stateFloor := slices.IndexFunc(subjects, func(s subject) bool { return s.kind == kindStateFloor })
	rows := make([]row, len(subjects))
	for j, s := range subjects {
		links, err := clusterLibraries(s.bin)
		if err != nil {
			return nil, err
		}
		rows[j] = row{subject: s, sizeMiB: sizeMiB(s.bin), links: links}
		if stateFloor >= 0 {
			rows[j].stateLo, rows[j].stateHi = ratioInterval(d[j], d[stateFloor])
		}
	}
	for j := range rows { // percentile sorts: only after every interval
		rows[j].p50, rows[j].p90, rows[j].cpu = percentile(d[j], 50), percentile(d[j], 90), percentile(cpu[j], 50)
	}
	return rows, nil
}

// percentile of sorted-in-place values, p in [0, 100], nearest rank.
func percentile[T cmp.Ordered](d []T, p int) T {
	slices.Sort(d)
	return d[(len(d)-1)*p/100]
}

// stateFloorTrip is an ADD and a DEL of the state floor, each saving its
// state to stateFile as a plugin's store does.
func stateFloorTrip(bin, stateFile string, conf []byte) roundTrip {
	return func(ctx context.Context, i int) error {
		id := fmt.Sprintf("bench%d", i+1000)
		for _, cmd := range []string{"ADD", "DEL"} {
			env := []string{"CDI_COMMAND=" + cmd, "CDI_REQUEST_ID=" + id, "BENCH_STATE_FILE=" + stateFile}
			if _, err := call(ctx, bin, env, conf); err != nil {
				return err
			}
		}
		return nil
	}
}

// floorTrip is two execs of the floor: what ADD+DEL would cost if a
// plugin did nothing but start and print.
func floorTrip(bin string) roundTrip {
	return func(ctx context.Context, _ int) error {
		for range 2 {
			if _, err := call(ctx, bin, nil, nil); err != nil {
				return err
			}
		}
		return nil
	}
}

// pluginTrip is ADD then DEL of one request-id per round.
func pluginTrip(bin string, conf []byte, request string) roundTrip {
	return func(ctx context.Context, i int) error {
		id := fmt.Sprintf("bench%d", i+1000)
		if err := addCall(ctx, bin, conf, request, id); err != nil {
			return err
		}
		return delCall(ctx, bin, conf, id)
	}
}

// addCall is one ADD that must grant at least one unit.
func addCall(ctx context.Context, bin string, conf []byte, request, id string) error {
	env := []string{"CDI_VERSION=0.1.0", "CDI_REQUEST_ID=" + id, "CDI_COMMAND=ADD", "CDI_REQUEST=" + request}
	out, err := call(ctx, bin, env, conf)
	if err != nil {
		return err
	}
	var res addResult
	if err := json.Unmarshal(out, &res); err != nil || len(res.Units) == 0 {
		return fmt.Errorf("ADD %s gave no units: %q (%v)", request, out, err)
	}
	return nil
}

// delCall is one DEL. DEL exits 0 even on failure (SPEC.md), so its
// stdout must be empty to count as a success.
func delCall(ctx context.Context, bin string, conf []byte, id string) error {
	out, err := call(ctx, bin, []string{"CDI_VERSION=0.1.0", "CDI_REQUEST_ID=" + id, "CDI_COMMAND=DEL"}, conf)
	if err == nil && len(bytes.TrimSpace(out)) > 0 {
		err = fmt.Errorf("DEL %s failed: %s", id, out)
	}
	return err
}

// versionCall is one VERSION: the plugin starts, prints and exits without
// reading stdin or touching state, so it is the plugin's start-up cost.
func versionCall(ctx context.Context, bin string) error {
	_, err := call(ctx, bin, []string{"CDI_COMMAND=VERSION"}, nil)
	return err
}

// hostLocalTrip is host-local's ADD then DEL of one container. CNI_NETNS
// names no namespace: host-local's own code never uses it, and the CNI
// skeleton only tries to open it after ADD and DEL (to refuse the
// plugin's own namespace), treating a missing path as fine.
func hostLocalTrip(bin, dataDir string) roundTrip {
	conf := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","ipam":{"type":"host-local","ranges":[[{"subnet":"10.10.0.0/16"}]],"dataDir":%q}}`, dataDir))
	return func(ctx context.Context, i int) error {
		env := []string{"CNI_CONTAINERID=bench" + fmt.Sprint(i+1000), "CNI_NETNS=/var/run/netns/bench", "CNI_IFNAME=eth0", "CNI_PATH=" + filepath.Dir(bin)}
		out, err := call(ctx, bin, append(env, "CNI_COMMAND=ADD"), conf)
		if err != nil {
			return err
		}
		var res struct{ IPs []struct{ Address string } }
		if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 || res.IPs[0].Address == "" {
			return fmt.Errorf("host-local ADD gave no ips: %q (%v)", out, err)
		}
		_, err = call(ctx, bin, append(env, "CNI_COMMAND=DEL"), conf)
		return err
	}
}

// dropIn is a default drop-in with root at the fixture, state in
// stateDir and the given args overridden.
func dropIn(root, path, stateDir string, override map[string]any) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, fmt.Errorf("drop-in: %w", err)
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("drop-in %s: %w", path, err)
	}
	args, _ := c["args"].(map[string]any)
	if args == nil {
		args = map[string]any{}
	}
	for k, v := range override {
		args[k] = v
	}
	args["root"], args["stateDir"], c["args"] = filepath.Join(root, "testdata", "root"), stateDir, args
	return json.Marshal(c)
}
