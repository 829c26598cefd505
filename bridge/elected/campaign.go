package elected

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// campaign runs one election: it waits to lead, leads until the lease is
// lost or ctx ends, and returns once the jobs have returned and the lease
// is let go, so that the next campaign never overlaps them.
func (c *Candidate) campaign(ctx context.Context) error {
	// Run calls OnStartedLeading at most once, in a goroutine of its own;
	// leading on this goroutine instead makes "the jobs have returned" a
	// plain return.
	started := make(chan context.Context, 1)
	le, err := c.elector(func(lctx context.Context) { started <- lctx })
	if err != nil {
		return err
	}
	// The elector's context is not ctx: ended, it releases the Lease at
	// once, and another bridge would start its jobs while these still
	// run. It ends when ctx does only if this bridge is not leading, else
	// once the jobs have returned.
	electing, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		le.Run(electing)
	}()
	select {
	case lctx := <-started:
		c.lead(ctx, lctx)
	case <-ctx.Done():
	}
	stopElecting()
	<-ran
	return nil
}

// elector is a leader elector on the Lease, calling lead when this
// bridge starts leading. LeaseLock only gets, creates and updates the
// Lease, within the bridge's RBAC; when the context Run is given ends,
// the lease is released (an update) so that another bridge takes over at
// once.
func (c *Candidate) elector(lead func(context.Context)) (*leaderelection.LeaderElector, error) {
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Namespace, Name: c.cfg.Lease},
			Client:     c.cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Node},
		},
		LeaseDuration:   c.cfg.LeaseDuration,
		RenewDeadline:   c.cfg.RenewDeadline,
		RetryPeriod:     c.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            c.cfg.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				c.log.Info("elected bridge: new leader", "leader", id, "self", id == c.cfg.Node)
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return le, nil
}

// lead is the leader's work until ctx ends or leadership does (lctx): it
// opens the store of every pool once, runs every job on it side by side,
// and returns once each has returned.
func (c *Candidate) lead(ctx, lctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(lctx, cancel)()
	c.log.Info("leading: running the elected bridge's jobs", "node", c.cfg.Node, "jobs", Names(c.cfg.Jobs))
	defer c.log.Info("no longer leading", "node", c.cfg.Node)
	store, err := c.cfg.OpenStore(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Error("opening the store of every pool for the elected bridge's jobs", "error", err)
		}
		<-ctx.Done() // leading, with no job, until leadership ends
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, job := range c.cfg.Jobs {
		wg.Go(func() {
			if err := job.Run(ctx, store); err != nil && ctx.Err() == nil {
				c.log.Error("an elected bridge's job stopped; it starts again when this bridge next leads", "job", job.Name(), "error", err)
			}
		})
	}
}

// Names are the jobs' names, for a log.
func Names(jobs []Job) []string {
	names := make([]string, len(jobs))
	for i, job := range jobs {
		names[i] = job.Name()
	}
	return names
}
