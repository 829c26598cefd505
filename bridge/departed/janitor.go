package departed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/cdiexec/cdi/bridge/instance"
)

// Store is what the Janitor needs of the Instance store; kube.Store has
// it.
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

// DefaultLease is the name of the Lease the bridges elect the Janitor's
// leader on.
const DefaultLease = "cdi-bridge-departed-nodes"

// Leader election timing when Config leaves it zero: client-go's defaults
// for the core components. Clearing a departed node is no hurry; a
// leader that dies is replaced within about LeaseDuration.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultNodePoll is how often a bridge whose own Node object is
	// missing looks for it again.
	DefaultNodePoll = 30 * time.Second
	// DefaultUnseenGrace is how long an Instance stays after the last
	// node stopped seeing it: a device replugged, a bridge restarting, a
	// drop-in edited keep their Instances and the names of their slots.
	DefaultUnseenGrace = 2 * time.Minute
	// DefaultPruneEvery is how often the leader looks for them.
	DefaultPruneEvery = 30 * time.Second
)

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("departed-node janitor configuration")

// Config says where the Janitor works and as whom.
type Config struct {
	Client kubernetes.Interface
	// OpenStore opens the Store the leader reads and writes, following
	// every pool's Instances, for as long as ctx lasts: a bridge's own
	// Store follows only the pools it serves, and only the leader holds
	// everything.
	OpenStore func(ctx context.Context) (Store, error)
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
	// UnseenGrace and PruneEvery are DefaultUnseenGrace and
	// DefaultPruneEvery when zero.
	UnseenGrace, PruneEvery time.Duration
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
	// WhileLeading, if not nil, is more work for the leader: it is
	// called with the store of every pool once the leader has it, and
	// must return once ctx ends, when leadership does. The leader's
	// Run returns only after it has.
	WhileLeading func(ctx context.Context, store Store)
}

// Janitor clears departed nodes' claims while its bridge leads.
type Janitor struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Janitor, error) {
	if cfg.Client == nil || cfg.OpenStore == nil || cfg.Node == "" || cfg.Namespace == "" {
		return nil, fmt.Errorf("%w: Client, OpenStore, Node and Namespace are required", ErrConfig)
	}
	if cfg.Lease == "" {
		cfg.Lease = DefaultLease
	}
	cfg.LeaseDuration = orDefault(cfg.LeaseDuration, DefaultLeaseDuration)
	cfg.RenewDeadline = orDefault(cfg.RenewDeadline, DefaultRenewDeadline)
	cfg.RetryPeriod = orDefault(cfg.RetryPeriod, DefaultRetryPeriod)
	cfg.NodePoll = orDefault(cfg.NodePoll, DefaultNodePoll)
	cfg.UnseenGrace = orDefault(cfg.UnseenGrace, DefaultUnseenGrace)
	cfg.PruneEvery = orDefault(cfg.PruneEvery, DefaultPruneEvery)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	j := &Janitor{cfg: cfg, log: log.With("lease", cfg.Lease)}
	// Checked here rather than at the first campaign: a bad timing is a
	// startup error, not something to find later.
	if _, err := j.elector(func(context.Context) {}); err != nil {
		return nil, err
	}
	return j, nil
}

// orDefault is d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Run takes part in the election until ctx ends, clearing departed
// nodes whenever this bridge leads; it returns nil when ctx ends. It
// first waits for this node's Node object.
func (j *Janitor) Run(ctx context.Context) error {
	if !j.waitOwnNode(ctx) {
		return nil
	}
	// client-go's leader election logs through the context's logger: to
	// the bridge's log, not klog's default.
	ctx = logr.NewContextWithSlogLogger(ctx, j.log)
	for ctx.Err() == nil {
		if err := j.campaign(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitOwnNode returns true once this node's Node object exists, false if
// ctx ends first.
func (j *Janitor) waitOwnNode(ctx context.Context) bool {
	warned := false
	for {
		_, err := j.cfg.Client.CoreV1().Nodes().Get(ctx, j.cfg.Node, metav1.GetOptions{})
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !warned {
			j.log.Warn("not clearing departed nodes until this node's Node object can be read: to a bridge whose node name names no Node, every node would look departed",
				"node", j.cfg.Node, "err", err, "retry", j.cfg.NodePoll)
			warned = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(j.cfg.NodePoll):
		}
	}
}

// campaign runs one election: it waits to lead, leads until the lease is
// lost or ctx ends, and returns once the leader's work has stopped, so
// that the next campaign never overlaps it.
func (j *Janitor) campaign(ctx context.Context) error {
	// Run calls OnStartedLeading at most once, in a goroutine of its own;
	// leading on this goroutine instead makes "the work has stopped" a
	// plain return.
	started := make(chan context.Context, 1)
	le, err := j.elector(func(lctx context.Context) { started <- lctx })
	if err != nil {
		return err
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		le.Run(ctx)
	}()
	select {
	case lctx := <-started:
		j.lead(lctx)
	case <-ran:
	}
	<-ran
	return nil
}

// elector is a leader elector on the Lease, calling lead when this
// bridge starts leading. LeaseLock only gets, creates and updates the
// Lease, within the bridge's RBAC; on ctx's end the lease is released (an
// update) so that another bridge takes over at once.
func (j *Janitor) elector(lead func(context.Context)) (*leaderelection.LeaderElector, error) {
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: j.cfg.Namespace, Name: j.cfg.Lease},
			Client:     j.cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: j.cfg.Node},
		},
		LeaseDuration:   j.cfg.LeaseDuration,
		RenewDeadline:   j.cfg.RenewDeadline,
		RetryPeriod:     j.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            j.cfg.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				j.log.Info("departed-node janitor: new leader", "leader", id, "self", id == j.cfg.Node)
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return le, nil
}
