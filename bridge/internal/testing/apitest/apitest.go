package apitest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cdiexec/cdi/plugins/exectest"
)

// AdminUser is the identity of Env.Config, in system:masters.
const AdminUser = "admin"

// DefaultTimeout bounds the wait for etcd and the apiserver to become
// ready. The apiserver takes about 20 seconds on two busy cores.
const DefaultTimeout = 3 * time.Minute

// ErrUnknownUser is returned by ConfigFor for a name Options.Users lacks.
var ErrUnknownUser = errors.New("no such test user")

// User is an identity with a token of its own.
type User struct {
	Name   string
	Groups []string
}

// Options say how to run the server. The zero value runs one with only
// the admin.
type Options struct {
	// Users are identities besides the admin. RBAC gives them nothing
	// until a test binds them a role.
	Users []User
	// Dir holds etcd's data, the credentials and the logs. When empty, a
	// new temporary directory.
	Dir string
	// Etcd is the etcd program; etcd on the PATH when empty.
	Etcd string
	// APIServer is a kube-apiserver program to use instead of building
	// one; the KUBE_APISERVER environment variable when empty.
	APIServer string
	// Timeout bounds the start once the binaries are there;
	// DefaultTimeout when zero.
	Timeout time.Duration
	// ExtraArgs are more of the apiserver's flags, each --name=value: a
	// node test's --authorization-mode=Node,RBAC and
	// --enable-admission-plugins=NodeRestriction, say. One naming a flag
	// that Start sets itself replaces it (list flags would otherwise add
	// up, and the apiserver refuses a mode given twice).
	ExtraArgs []string
}

// Env is a running etcd and kube-apiserver.
type Env struct {
	// Config is the admin's client configuration.
	Config *rest.Config
	// Dir is Options.Dir or the directory Run made. Run's caller removes
	// it once the logs in it are of no more use; Start does that itself
	// when the test passed.
	Dir string
	// Logs of the build (if there was one), etcd and the apiserver.
	BuildLog, EtcdLog, APIServerLog string
	// Built is how long building the kube-apiserver took, zero when a
	// cached one was used; Ready how long etcd and the apiserver took from
	// their start to ready.
	Built, Ready time.Duration

	host   string
	caPEM  []byte
	tokens map[string]string

	etcd, apiserver *process
	// apiserverArgv starts the apiserver, again after StopAPIServer.
	apiserverArgv []string
	stopOnce      sync.Once
	stopErr       error
}

// Start runs a server for the test and stops it when the test ends. When
// etcd or the Go toolchain is missing, it fails the test if the CI
// environment variable is set, and skips it otherwise. With -short it
// skips at once: the quick run builds no kube-apiserver. Logs are kept,
// and their paths printed, when the test fails.
func Start(tb testing.TB, opts Options) *Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip("skipping with -short: needs etcd and a kube-apiserver (make test runs it)")
	}
	ctx := context.Background()
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
	}
	env, err := Run(ctx, opts)
	switch {
	case errors.Is(err, ErrUnavailable) && MustRun():
		tb.Fatalf("%v (the CI environment variable is set, so this is not skipped)", err)
	case errors.Is(err, ErrUnavailable):
		tb.Skipf("skipping: %v", err)
	case err != nil:
		tb.Fatal(err)
	}
	if env.Built > 0 {
		tb.Logf("built kube-apiserver in %v", env.Built.Round(time.Second))
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Error(err)
		}
		if tb.Failed() {
			tb.Logf("test API server logs kept: %s %s", env.EtcdLog, env.APIServerLog)
			return
		}
		os.RemoveAll(env.Dir)
	})
	return env
}

// MustRun reports whether a missing program must fail the tests rather
// than skip them: when the CI environment variable is set, unless the
// tests run with -short (exectest.MustRun).
func MustRun() bool { return exectest.MustRun() }

// Run starts etcd and a kube-apiserver and returns once the apiserver is
// ready; ctx bounds the build and the start. The caller calls Stop. When
// Run fails, it has stopped whatever it started; the error names the log
// to read.
func Run(ctx context.Context, opts Options) (_ *Env, err error) {
	etcd, err := lookEtcd(opts.Etcd)
	if err != nil {
		return nil, err
	}
	env := &Env{Dir: opts.Dir}
	if env.Dir == "" {
		if env.Dir, err = os.MkdirTemp("", "apitest-"); err != nil {
			return nil, err
		}
	}
	env.BuildLog = filepath.Join(env.Dir, "build.log")
	env.EtcdLog = filepath.Join(env.Dir, "etcd.log")
	env.APIServerLog = filepath.Join(env.Dir, "kube-apiserver.log")
	apiserver, err := env.apiserverProgram(ctx, opts.APIServer)
	if errors.Is(err, ErrUnavailable) && opts.Dir == "" {
		os.RemoveAll(env.Dir) // nothing in it worth keeping
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if err := env.start(ctx, etcd, apiserver, opts); err != nil {
		return nil, err
	}
	env.Ready = time.Since(start)
	env.Config = env.config(env.tokens[AdminUser])
	return env, nil
}

// apiserverProgram is the kube-apiserver to run: given, or built.
func (e *Env) apiserverProgram(ctx context.Context, given string) (string, error) {
	if given == "" {
		given = os.Getenv("KUBE_APISERVER")
	}
	if given != "" {
		return given, nil
	}
	bin, built, err := apiserverBinary(ctx, e.BuildLog)
	e.Built = built
	return bin, err
}

// start writes the credentials and starts etcd, then the apiserver.
func (e *Env) start(ctx context.Context, etcd, apiserver string, opts Options) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	e.host = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	creds, err := writeCredentials(e.Dir)
	if err != nil {
		return err
	}
	e.caPEM = creds.caPEM
	tokenFile, err := e.writeTokens(opts.Users)
	if err != nil {
		return err
	}
	e.etcd, err = startProcess("etcd", e.EtcdLog, []string{etcd,
		"--name=apitest", "--data-dir=" + filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=apitest=" + peerURL,
	})
	if err != nil {
		return err
	}
	if err := e.etcd.waitReady(ctx, http.DefaultClient, etcdURL+"/health", ""); err != nil {
		return err
	}
	e.apiserverArgv = []string{apiserver,
		"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--tls-cert-file=" + creds.servingCert, "--tls-private-key-file=" + creds.servingKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + creds.saPublic,
		"--service-account-signing-key-file=" + creds.saPrivate,
		"--token-auth-file=" + tokenFile, "--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		// From 1.37 the endpoint reconciler refuses a loopback
		// advertise address; nothing here reaches the apiserver
		// through the kubernetes Service, so none keeps its endpoints.
		"--endpoint-reconciler-type=none",
	}
	e.apiserverArgv = withArgs(e.apiserverArgv, opts.ExtraArgs)
	return e.StartAPIServer(ctx)
}

// withArgs returns argv with each of extra (--name=value) in place of the
// flag of its name, or appended where argv has none.
func withArgs(argv, extra []string) []string {
	out := slices.Clone(argv)
	for _, arg := range extra {
		name, _, _ := strings.Cut(arg, "=")
		i := slices.IndexFunc(out, func(a string) bool { return strings.HasPrefix(a, name+"=") })
		if i >= 0 {
			out[i] = arg
		} else {
			out = append(out, arg)
		}
	}
	return out
}

// StopAPIServer stops the apiserver alone, leaving etcd and its data, so
// that a test can see its clients through an outage; StartAPIServer
// brings it back on the same address.
func (e *Env) StopAPIServer() error {
	return e.apiserver.stop()
}

// StartAPIServer starts the apiserver (after StopAPIServer) and waits
// until it is ready.
func (e *Env) StartAPIServer(ctx context.Context) error {
	var err error
	e.apiserver, err = startProcess("kube-apiserver", e.APIServerLog, e.apiserverArgv)
	if err != nil {
		return err
	}
	return e.apiserver.waitReady(ctx, e.httpClient(), e.host+"/readyz", e.tokens[AdminUser])
}

// PIDs are the process ids of etcd and the apiserver, for a benchmark
// that reads their memory; 0 for one that is not running.
func (e *Env) PIDs() (etcd, apiserver int) {
	return e.etcd.pid(), e.apiserver.pid()
}

// writeTokens gives the admin and every user a random token and writes
// the apiserver's token file: token,user,uid,"group,...".
func (e *Env) writeTokens(users []User) (string, error) {
	all := append([]User{{Name: AdminUser, Groups: []string{"system:masters"}}}, users...)
	e.tokens = make(map[string]string, len(all))
	var b strings.Builder
	for _, u := range all {
		if _, dup := e.tokens[u.Name]; dup || u.Name == "" || strings.ContainsAny(u.Name, ",\"\n") {
			return "", fmt.Errorf("test user %q: empty, repeated or not a plain name", u.Name)
		}
		e.tokens[u.Name] = rand.Text()
		fmt.Fprintf(&b, "%s,%s,%s,%q\n", e.tokens[u.Name], u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	path := filepath.Join(e.Dir, "tokens.csv")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// ConfigFor returns the client configuration of one of Options.Users.
func (e *Env) ConfigFor(user string) (*rest.Config, error) {
	token, ok := e.tokens[user]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownUser, user)
	}
	return e.config(token), nil
}

// config authenticates with token. Rate limits are far above what a
// test needs: the server is the test's alone.
func (e *Env) config(token string) *rest.Config {
	return &rest.Config{
		Host:            e.host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.caPEM},
		QPS:             1000,
		Burst:           2000,
	}
}

// httpClient trusts the server's CA only.
func (e *Env) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.caPEM)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// Stop stops the apiserver, then etcd, and removes etcd's data. It may be
// called more than once.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		var errs []error
		for _, p := range []*process{e.apiserver, e.etcd} {
			if p != nil {
				errs = append(errs, p.stop())
			}
		}
		errs = append(errs, os.RemoveAll(filepath.Join(e.Dir, "etcd")))
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// Kubeconfig writes a kubeconfig file for user (AdminUser or one of
// Options.Users) into the test's temporary directory and returns its path,
// for programs the test runs.
func (e *Env) Kubeconfig(tb testing.TB, user string) string {
	tb.Helper()
	cfg := e.config(e.tokens[AdminUser])
	if user != AdminUser {
		var err error
		if cfg, err = e.ConfigFor(user); err != nil {
			tb.Fatal(err)
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	kc.CurrentContext = "test"
	path := filepath.Join(tb.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		tb.Fatal(err)
	}
	return path
}
