package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

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

// roundTrip is one ADD+DEL (or the floor's two execs) for round i.
type roundTrip func(ctx context.Context, i int) error

// timeRounds runs rt n times after a warm-up and returns the durations.
func timeRounds(ctx context.Context, n int, rt roundTrip) ([]time.Duration, error) {
	for i := 0; i < 5; i++ {
		if err := rt(ctx, -1-i); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, n)
	for i := range out {
		start := time.Now()
		if err := rt(ctx, i); err != nil {
			return nil, err
		}
		out[i] = time.Since(start)
	}
	return out, nil
}

// percentile of sorted-in-place durations, p in [0, 100].
func percentile(d []time.Duration, p int) time.Duration {
	slices.Sort(d)
	return d[(len(d)-1)*p/100]
}

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
		id := fmt.Sprintf("bench%d", i+10)
		base := []string{"CDI_VERSION=0.1.0", "CDI_REQUEST_ID=" + id}
		out, err := call(ctx, bin, append(base, "CDI_COMMAND=ADD", "CDI_REQUEST="+request), conf)
		if err != nil {
			return err
		}
		var res struct{ Devices []string }
		if err := json.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("ADD output %q: %w", out, err)
		}
		_, err = call(ctx, bin, append(base, "CDI_COMMAND=DEL"), conf)
		return err
	}
}

// hostLocalTrip is host-local's ADD then DEL of one container.
func hostLocalTrip(bin, dataDir string) roundTrip {
	conf := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"bench","ipam":{"type":"host-local","ranges":[[{"subnet":"10.10.0.0/16"}]],"dataDir":%q}}`, dataDir))
	return func(ctx context.Context, i int) error {
		env := []string{"CNI_CONTAINERID=bench" + fmt.Sprint(i+10), "CNI_NETNS=/var/run/netns/bench", "CNI_IFNAME=eth0", "CNI_PATH=" + filepath.Dir(bin)}
		out, err := call(ctx, bin, append(env, "CNI_COMMAND=ADD"), conf)
		if err != nil {
			return err
		}
		if !bytes.Contains(out, []byte(`"ips"`)) {
			return fmt.Errorf("host-local ADD gave no ips: %s", out)
		}
		_, err = call(ctx, bin, append(env, "CNI_COMMAND=DEL"), conf)
		return err
	}
}

// dropIn is a default drop-in with root at the fixture and state in dir.
func dropIn(root, path, stateDir string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	var c map[string]any
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	args, _ := c["args"].(map[string]any)
	if args == nil {
		args = map[string]any{}
	}
	args["root"], args["stateDir"], c["args"] = filepath.Join(root, "testdata", "root"), stateDir, args
	return json.Marshal(c)
}
