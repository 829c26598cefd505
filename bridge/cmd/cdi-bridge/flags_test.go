package main

import (
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdiexec/cdi/bridge/discovery"
	"github.com/cdiexec/cdi/bridge/instance/kube"
)

// A command line that does not parse is a usage error (exit 2) before
// anything starts: flags after a positional argument were ignored, so
// `cdi-bridge extra --store bogus` ran with every default against the
// host's real paths.
func TestUsageErrors(t *testing.T) {
	stderr := os.Stderr
	os.Stderr, _ = os.Open(os.DevNull) // the flag package prints usage there
	defer func() { os.Stderr = stderr }()
	for _, args := range [][]string{
		{"extra", "--store", "bogus"},
		{"--store", "local", "extra"},
		{"--no-such-flag"},
		{"--reclaim-grace", "soon"},
	} {
		if _, err := parseFlags(args); !errors.Is(err, errUsage) {
			t.Errorf("parseFlags(%q) = %v, want a usage error", args, err)
		}
	}
	if _, err := parseFlags([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp", err)
	}
	if _, err := parseFlags([]string{"--store", "local"}); err != nil {
		t.Errorf("a good command line: %v", err)
	}
	if o, err := parseFlags([]string{"--version"}); err != nil || !o.version {
		t.Errorf("--version: %+v, %v", o, err)
	}
}

// The device watch is on by default and can be turned off; its debounce
// is the discovery package's unless set.
func TestWatchFlags(t *testing.T) {
	tests := []struct {
		args     []string
		watch    bool
		debounce time.Duration
	}{
		{nil, true, discovery.DefaultDebounce},
		{[]string{"--watch-devices=false"}, false, discovery.DefaultDebounce},
		{[]string{"--watch-debounce", "250ms"}, true, 250 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseFlags(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if o.watchDevices != tc.watch || o.watchDebounce != tc.debounce {
				t.Errorf("watch %v, debounce %v; want %v, %v", o.watchDevices, o.watchDebounce, tc.watch, tc.debounce)
			}
		})
	}
}

// A --max-devices-per-drop-in that a Presence could not hold is refused
// before the Kubernetes store is opened, not at the first discovery's
// Presence write; the local store has no such limit.
func TestMaxDevicesFitsPresence(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// An address nothing listens on: the refusal must come first.
	conf := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	over := strconv.Itoa(kube.MaxPresenceDevices + 1)
	o, err := parseFlags([]string{"--store", "kube", "--kubeconfig", kubeconfig, "--max-devices-per-drop-in", over})
	if err != nil {
		t.Fatal(err)
	}
	api, err := resolveKube(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(t.Context(), o, api, slog.New(slog.DiscardHandler)); !errors.Is(err, errUsage) {
		t.Errorf("openStore with --max-devices-per-drop-in=%s: %v, want a usage error", over, err)
	}
	o, err = parseFlags([]string{"--store", "local", "--local-store", filepath.Join(t.TempDir(), "state.json"), "--max-devices-per-drop-in", over})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(t.Context(), o, nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("the local store with --max-devices-per-drop-in=%s: %v", over, err)
	}
}

// The API's configuration is resolved once, and only where something
// needs it: the Kubernetes store (auto's too) or the DRA front end. The
// store, the janitor and DRA then share what resolveKube returns.
func TestResolveKube(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // never in a cluster
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	conf := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args      []string
		wantAPI   bool
		wantStore string // "" for chooseStore's error
	}{
		{[]string{"--store", "local"}, false, storeLocal},
		{[]string{"--store", "local", "--kubeconfig", kubeconfig}, false, storeLocal},
		{[]string{"--store", "local", "--kubeconfig", kubeconfig, "--dra-pools", "gpu-drm"}, true, storeLocal},
		{[]string{"--kubeconfig", kubeconfig}, true, storeKube},
		{nil, false, storeLocal},
		{[]string{"--store", "kube"}, false, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseFlags(append(tc.args, "--node-name", "n1"))
			if err != nil {
				t.Fatal(err)
			}
			api, err := resolveKube(o)
			if err != nil || (api != nil) != tc.wantAPI {
				t.Fatalf("resolveKube = %+v, %v; want the API: %v", api, err, tc.wantAPI)
			}
			if api != nil && (api.client == nil || api.cfg.UserAgent != "cdi-bridge/n1") {
				t.Errorf("API access %+v: want a client, and the node in the user agent", api)
			}
			kind, _, err := chooseStore(o, api)
			if kind != tc.wantStore || (err == nil) != (tc.wantStore != "") {
				t.Errorf("chooseStore = %q, %v; want %q", kind, err, tc.wantStore)
			}
		})
	}
}

// A flag given empty takes its documented default: the README's
// --node-name "$NODE_NAME", on a machine without the variable, said the
// node name was empty and the host name unknown, though --help showed
// the host name as the default. A flag whose help says what its empty
// value does keeps it.
func TestEmptyFlagsTakeTheirDefaults(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skipf("no host name here: %v", err)
	}
	for _, tc := range []struct {
		nodeNameEnv, want string
	}{{"", host}, {"n7", "n7"}} {
		t.Run("NODE_NAME="+tc.nodeNameEnv, func(t *testing.T) {
			t.Setenv("NODE_NAME", tc.nodeNameEnv)
			o, err := parseFlags([]string{"--node-name", "", "--conf-dir", "", "--cdi-spec-dir", "", "--domain", "",
				"--metrics-address", "", "--pod-resources-socket", "", "--leader-election-lease", "", "--kubeconfig", ""})
			if err != nil {
				t.Fatal(err)
			}
			got := []string{o.nodeName, o.confDir, o.cdiSpecDir, o.domain, o.metricsAddr, o.podResources, o.leaseName, o.kubeconfig}
			want := []string{tc.want, "/etc/cdi", "/var/run/cdi", "cdi.local", "", "", "", ""}
			if !slices.Equal(got, want) {
				t.Errorf("options %q, want %q", got, want)
			}
		})
	}
}

// Which flags keep an empty value is what their help says: the list in
// emptyIsDefault and the help text must not drift apart.
func TestEmptyMeaningIsInTheHelp(t *testing.T) {
	fs := flagSet(&options{})
	var args []string
	fs.VisitAll(func(f *flag.Flag) {
		if _, isString := f.Value.(flag.Getter).Get().(string); isString && f.DefValue != "" {
			args = append(args, "--"+f.Name+"=")
		}
	})
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	emptyIsDefault(fs)
	fs.Visit(func(f *flag.Flag) {
		kept := f.Value.String() == ""
		if says := strings.Contains(f.Usage, "empty"); kept != says {
			t.Errorf("--%s given empty is %q; its help (%q) says what empty does: %v", f.Name, f.Value, f.Usage, says)
		}
	})
	if len(args) < 10 {
		t.Errorf("only %d string flags with a default: %v", len(args), args)
	}
}

// flagTable is a document's flag reference: the flags of each group,
// in the order of the groups.
type flagTable struct {
	titles []string
	flags  map[string][]string // by group title, sorted
}

// referenceTables reads bridge/README.md's "## Flags" section: a "###"
// heading per group, a table row per flag ("| `--name` | ...").
func referenceTables(text string) flagTable {
	t := flagTable{flags: map[string][]string{}}
	_, section, _ := strings.Cut(text, "\n## Flags\n")
	section, _, _ = strings.Cut(section, "\n## ")
	title := ""
	for line := range strings.Lines(section) {
		switch {
		case strings.HasPrefix(line, "### "):
			title = strings.TrimSpace(strings.TrimPrefix(line, "### "))
			t.titles = append(t.titles, title)
		case strings.HasPrefix(line, "| `--"):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "| `--"), "`")
			t.flags[title] = append(t.flags[title], name)
		}
	}
	for _, names := range t.flags {
		slices.Sort(names)
	}
	return t
}

// helpTables reads --help's groups, after its head (usageHead): a line
// "<title>:" per group, then a line "  -name ..." per flag.
func helpTables(help string) flagTable {
	t := flagTable{flags: map[string][]string{}}
	title := ""
	groups, _ := strings.CutPrefix(help, usageHead)
	for line := range strings.Lines(groups) {
		switch {
		case strings.HasPrefix(line, "  -"):
			name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "-"), " ")
			t.flags[title] = append(t.flags[title], name)
		case strings.HasSuffix(line, ":\n") && !strings.HasPrefix(line, " "):
			title = strings.TrimSuffix(line, ":\n")
			t.titles = append(t.titles, title)
		}
	}
	for _, names := range t.flags {
		slices.Sort(names)
	}
	return t
}

// The operator's flag reference (bridge/README.md) and --help name the
// same flags in the same groups, in the same order, and every flag
// cdi-bridge defines is in one group: a flag added, renamed or moved in
// one must be in the other.
func TestFlagReferenceIsTheHelp(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var help strings.Builder
	fs := flagSet(&options{})
	fs.SetOutput(&help)
	fs.Usage()
	ref, got := referenceTables(string(doc)), helpTables(help.String())
	if !slices.Equal(ref.titles, got.titles) {
		t.Errorf("groups: bridge/README.md has %q, --help %q", ref.titles, got.titles)
	}
	all := 0
	for _, title := range got.titles {
		all += len(got.flags[title])
		if !slices.Equal(ref.flags[title], got.flags[title]) {
			t.Errorf("group %q: bridge/README.md has %q, --help %q", title, ref.flags[title], got.flags[title])
		}
	}
	defined := 0
	fs.VisitAll(func(*flag.Flag) { defined++ })
	if all != defined || defined < 30 {
		t.Errorf("--help lists %d flags in its groups; cdi-bridge defines %d", all, defined)
	}
	for _, frontEnd := range []string{"device plugins", "DRA"} {
		if head, _, _ := strings.Cut(help.String(), "Usage:"); !strings.Contains(head, frontEnd) {
			t.Errorf("--help's first lines do not name the front end %q:\n%s", frontEnd, head)
		}
	}
}
