package electtest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cdiexec/cdi/bridge/elected"
	"github.com/cdiexec/cdi/bridge/instance/kube"
	"github.com/cdiexec/cdi/bridge/internal/testing/apitest"
)

// User is the identity every Candidate that Start runs is; the apitest
// server must be started with it (apitest.Options.Users).
const User = "bridge"

// Test timing: fast enough for tests, and the lease a whole number of
// seconds, since the Lease records it in seconds.
const (
	Lease = 2 * time.Second
	Renew = time.Second
	Retry = 200 * time.Millisecond
)

// Grant gives User, cluster-wide, the nodes, Instances and Presences
// rules of the bridge's RBAC; the Lease's come per namespace
// (NewCluster). Call it once per API server.
func Grant(tb testing.TB, admin kubernetes.Interface) {
	tb.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cdi-bridge-test"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{kube.Group}, Resources: []string{"instances", "presences"},
			Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cdi-bridge-test"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: User}}}
	rbac := admin.RbacV1()
	if _, err := rbac.ClusterRoles().Create(tb.Context(), role, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(tb.Context(), binding, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// Cluster is one test's namespace of an API server, in which User may
// elect a leader on elected.DefaultLease.
type Cluster struct {
	TB        testing.TB
	Env       *apitest.Env
	Admin     kubernetes.Interface
	Namespace string
}

// NewCluster makes a namespace in which User may elect a leader, and a
// Node object for each of nodes. Nodes are cluster-wide: every test names
// its own.
func NewCluster(tb testing.TB, env *apitest.Env, admin kubernetes.Interface, nodes ...string) *Cluster {
	tb.Helper()
	c := &Cluster{TB: tb, Env: env, Admin: admin, Namespace: env.Namespace(tb)}
	// As bridge/deploy/rbac.yaml has it: get and update of the one Lease
	// by name; create cannot be limited to a name.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{elected.DefaultLease},
			Verbs: []string{"get", "update"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: User}}}
	if _, err := admin.RbacV1().Roles(c.Namespace).Create(tb.Context(), role, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(c.Namespace).Create(tb.Context(), binding, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	c.CreateNodes(nodes...)
	return c
}

// CreateNodes creates a Node object, with just a name, for each of nodes.
func (c *Cluster) CreateNodes(nodes ...string) {
	c.TB.Helper()
	for _, n := range nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if _, err := c.Admin.CoreV1().Nodes().Create(c.TB.Context(), node, metav1.CreateOptions{}); err != nil {
			c.TB.Fatal(err)
		}
	}
}

// Start runs a Candidate of cfg as node's bridge would, in the cluster's
// namespace with User's client and the test timing (cfg's Client, Node,
// Namespace, timing and Logger are set here), until the returned stop is
// called or the test ends. stop returns once the Candidate's Run has.
// Its log is shown when the test fails.
func (c *Cluster) Start(node string, cfg elected.Config) (stop func()) {
	c.TB.Helper()
	rc, err := c.Env.ConfigFor(User)
	if err != nil {
		c.TB.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		c.TB.Fatal(err)
	}
	logs := &Log{}
	cfg.Client, cfg.Node, cfg.Namespace, cfg.Logger = client, node, c.Namespace, logs.Logger()
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod, cfg.NodePoll = Lease, Renew, Retry, Retry
	candidate, err := elected.New(cfg)
	if err != nil {
		c.TB.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- candidate.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				c.TB.Errorf("elected bridge %s: %v", node, err)
			}
		})
	}
	c.TB.Cleanup(func() {
		stop()
		if c.TB.Failed() {
			c.TB.Logf("elected bridge %s's log:\n%s", node, logs.String())
		}
	})
	return stop
}

// Holder is the Lease's holder; empty when there is none, or the Lease
// cannot be read.
func (c *Cluster) Holder() string {
	lease, err := c.Admin.CoordinationV1().Leases(c.Namespace).Get(c.TB.Context(), elected.DefaultLease, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// Renewals reads the Lease until holder has renewed it n times since the
// first read, it names another holder (or none), or limit has passed, and
// returns the renewals it saw.
func (c *Cluster) Renewals(holder string, n int, limit time.Duration) int {
	c.TB.Helper()
	leases := c.Admin.CoordinationV1().Leases(c.Namespace)
	var last time.Time
	seen := -1 // the first read's renewal is not one since
	for deadline := time.Now().Add(limit); seen < n && time.Now().Before(deadline); time.Sleep(limit / 1000) {
		lease, err := leases.Get(c.TB.Context(), elected.DefaultLease, metav1.GetOptions{})
		if err != nil {
			c.TB.Fatal(err)
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder || lease.Spec.RenewTime == nil {
			break
		}
		if renewed := lease.Spec.RenewTime.Time; !renewed.Equal(last) {
			last = renewed
			seen++
		}
	}
	return max(seen, 0)
}

// Log is a log that goroutines may write to after the test has ended,
// unlike t.Log.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// logTail is the most of a log a Log keeps: the end of a long run's.
const logTail = 1 << 20

func (b *Log) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > logTail {
		b.buf.Next(b.buf.Len() - logTail/2)
	}
	return b.buf.Write(p)
}

func (b *Log) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger writes text to b, debug level and up.
func (b *Log) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
