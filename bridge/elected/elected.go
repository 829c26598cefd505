package elected

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Store is the store of every pool, opened once per leadership and
// shared by the jobs: what they read (List) and what the departed-node
// job writes. kube.Store, opened with kube.AllPools, has it.
type Store interface {
	// List returns every Instance.
	List(ctx context.Context) ([]instance.Instance, error)
	// Nodes returns every node an Instance or a Presence names, sorted:
	// those that see a device, or saw none of a pool, and those whose
	// claims hold slots. With an error it returns what it could read.
	Nodes(ctx context.Context) ([]string, error)
	// ForgetNode frees every slot node holds and removes it from every
	// Instance's nodes, returning how many slots it freed.
	ForgetNode(ctx context.Context, node string) (freed int, err error)
	// PruneUnseen deletes the Instances that no node has seen, and
	// whose slots are free, since grace before now.
	PruneUnseen(ctx context.Context, grace time.Duration, now time.Time) (deleted int, err error)
}

// Job is work the elected bridge does for the cluster while it leads.
type Job interface {
	// Name names the job in the log.
	Name() string
	// Run does the job from store until ctx ends, when leadership does,
	// and then returns nil. It returns an error when the job cannot go
	// on; the job then waits for this bridge's next leadership.
	Run(ctx context.Context, store Store) error
}

// DefaultLease is the name of the Lease the bridges elect on. It keeps
// the name it had when clearing departed nodes was the elected bridge's
// only job: the deployed RBAC names it, and a bridge of a newer version
// must elect on the same Lease as one of an older during a rollout.
const DefaultLease = "cdi-bridge-departed-nodes"

// Leader election timing when Config leaves it zero: client-go's defaults
// for the core components. The jobs are no hurry; a leader that dies is
// replaced within about LeaseDuration.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultNodePoll is how often a bridge whose own Node object is
	// missing looks for it again.
	DefaultNodePoll = 30 * time.Second
)

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("elected bridge configuration")

// Config says where the bridge runs for election, as whom, and what it
// does when elected.
type Config struct {
	Client kubernetes.Interface
	// OpenStore opens the Store the jobs share, following every pool's
	// Instances, for as long as ctx lasts: a bridge's own Store follows
	// only the pools it serves, and only the leader holds everything.
	OpenStore func(ctx context.Context) (Store, error)
	// Jobs are run side by side, each in a goroutine of its own, while
	// this bridge leads.
	Jobs []Job
	// Node is this bridge's node: its identity in the election, and a
	// Node object that must exist before it takes part.
	Node string
	// Namespace holds the Lease, the Instances' namespace.
	Namespace string
	// Lease is the Lease's name; DefaultLease when empty.
	Lease string
	// Leader election timing; the defaults above when zero.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// NodePoll is DefaultNodePoll when zero.
	NodePoll time.Duration
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

// Candidate is one bridge running for election, and doing the jobs while
// it is elected.
type Candidate struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Candidate, error) {
	if cfg.Client == nil || cfg.OpenStore == nil || cfg.Node == "" || cfg.Namespace == "" {
		return nil, fmt.Errorf("%w: Client, OpenStore, Node and Namespace are required", ErrConfig)
	}
	for i, job := range cfg.Jobs {
		if job == nil {
			return nil, fmt.Errorf("%w: job %d is nil", ErrConfig, i)
		}
	}
	if cfg.Lease == "" {
		cfg.Lease = DefaultLease
	}
	cfg.LeaseDuration = orDefault(cfg.LeaseDuration, DefaultLeaseDuration)
	cfg.RenewDeadline = orDefault(cfg.RenewDeadline, DefaultRenewDeadline)
	cfg.RetryPeriod = orDefault(cfg.RetryPeriod, DefaultRetryPeriod)
	cfg.NodePoll = orDefault(cfg.NodePoll, DefaultNodePoll)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Candidate{cfg: cfg, log: log.With("lease", cfg.Lease)}
	// Checked here rather than at the first campaign: a bad timing is a
	// startup error, not something to find later.
	if _, err := c.elector(func(context.Context) {}); err != nil {
		return nil, err
	}
	return c, nil
}

// orDefault is d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Run takes part in the election until ctx ends, doing the jobs whenever
// this bridge leads; it returns nil when ctx ends, once the jobs have
// returned. It first waits for this node's Node object.
func (c *Candidate) Run(ctx context.Context) error {
	if !c.waitOwnNode(ctx) {
		return nil
	}
	// client-go's leader election logs through the context's logger: to
	// the bridge's log, not klog's default.
	ctx = logr.NewContextWithSlogLogger(ctx, c.log)
	for ctx.Err() == nil {
		if err := c.campaign(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitOwnNode returns true once this node's Node object exists, false if
// ctx ends first.
func (c *Candidate) waitOwnNode(ctx context.Context) bool {
	warned := false
	for {
		_, err := c.cfg.Client.CoreV1().Nodes().Get(ctx, c.cfg.Node, metav1.GetOptions{})
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !warned {
			c.log.Warn("not running for election until this node's Node object can be read: to a bridge whose node name names no Node, every node would look departed",
				"node", c.cfg.Node, "error", err, "retry", c.cfg.NodePoll)
			warned = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.cfg.NodePoll):
		}
	}
}
