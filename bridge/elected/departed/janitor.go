package departed

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Timing when Config leaves it zero.
const (
	// DefaultUnseenGrace is how long an Instance stays after the last
	// node stopped seeing it: a device replugged, a bridge restarting, a
	// drop-in edited keep their Instances and the names of their slots.
	DefaultUnseenGrace = 2 * time.Minute
	// DefaultPruneEvery is how often the leader looks for them.
	DefaultPruneEvery = 30 * time.Second
)

// ErrConfig is wrapped by New's errors.
var ErrConfig = errors.New("departed-node janitor configuration")

// Config says how the Janitor works.
type Config struct {
	// Client reads and watches the Nodes.
	Client kubernetes.Interface
	// UnseenGrace and PruneEvery are DefaultUnseenGrace and
	// DefaultPruneEvery when zero.
	UnseenGrace, PruneEvery time.Duration
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

// Janitor clears departed nodes' claims and prunes the Instances no node
// sees: an elected.Job.
type Janitor struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Janitor, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is required", ErrConfig)
	}
	cfg.UnseenGrace = orDefault(cfg.UnseenGrace, DefaultUnseenGrace)
	cfg.PruneEvery = orDefault(cfg.PruneEvery, DefaultPruneEvery)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Janitor{cfg: cfg, log: log.With("job", jobName)}, nil
}

// jobName is the Janitor's Name.
const jobName = "departed nodes"

// Name is the job's name in the log.
func (j *Janitor) Name() string { return jobName }

// orDefault is d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
