package departed

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Retries of a node whose clearing failed (the API server unreachable, a
// write that kept conflicting): soon at first, at most every few minutes.
const (
	retryFirst = time.Second
	retryMax   = 5 * time.Minute
)

// lead is the leader's work, until ctx ends: watch the Nodes, sweep once,
// then clear each node whose Node object is deleted, and prune the
// Instances no node sees; and run Config.WhileLeading. A queue lies between
// the informer and the clearing so that the informer's handler never
// waits on API writes, a node is cleared once however many times it is
// queued, and a failed clearing is retried.
func (j *Janitor) lead(ctx context.Context) {
	j.log.Info("leading: clearing departed nodes' claims", "node", j.cfg.Node)
	defer j.log.Info("no longer leading", "node", j.cfg.Node)
	queue := workqueue.NewTypedRateLimitingQueue(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryFirst, retryMax))
	defer queue.ShutDown()
	store, err := j.cfg.OpenStore(ctx)
	if err != nil {
		if ctx.Err() == nil {
			j.log.Error("departed-node janitor: opening the store of every pool", "err", err)
		}
		return
	}
	nodes, err := j.watchNodes(ctx, queue)
	if err != nil {
		if ctx.Err() == nil {
			j.log.Error("departed-node janitor: watching nodes", "err", err)
		}
		return
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	// The leader's work has stopped when lead returns: the next
	// leader's, here or elsewhere, must not overlap a deletion of this
	// one's.
	var wg sync.WaitGroup
	defer wg.Wait()
	if j.cfg.WhileLeading != nil {
		wg.Go(func() { j.cfg.WhileLeading(ctx, store) })
	}
	j.sweep(ctx, store, nodes, queue)
	wg.Go(func() { j.prune(ctx, store) })
	for j.next(ctx, store, queue) {
	}
}

// prune deletes, every PruneEvery until ctx ends, the Instances no node
// has seen for UnseenGrace (Store.PruneUnseen).
func (j *Janitor) prune(ctx context.Context, store Store) {
	tick := time.NewTicker(j.cfg.PruneEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		deleted, err := store.PruneUnseen(ctx, j.cfg.UnseenGrace, time.Now())
		if deleted > 0 || (err != nil && ctx.Err() == nil) {
			j.log.Info("deleted Instances no node has seen", "for", j.cfg.UnseenGrace.String(), "deleted", deleted, "err", err)
		}
	}
}

// watchNodes starts an informer on the Nodes, running until ctx ends,
// that queues the name of every Node deleted; it returns the informer's
// store once it holds the first full list.
func (j *Janitor) watchNodes(ctx context.Context, queue workqueue.TypedInterface[string]) (cache.Store, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(j.cfg.Client, 0, informers.WithTransform(nameOnly))
	informer := factory.Core().V1().Nodes().Informer()
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			// A tombstone's key is the name: Nodes have no namespace.
			if name, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				j.log.Info("node deleted", "node", name)
				queue.Add(name)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching nodes: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("listing nodes: %w", ctx.Err())
	}
	return informer.GetStore(), nil
}

// nameOnly keeps of a Node what the janitor reads, its name: a Node's
// status (images, conditions) is large, and the leader holds every one.
func nameOnly(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}}, nil
}

// sweep queues every node the Instances or the Presences name that has
// no Node object: nodes deleted while no leader watched, or before this
// one started; a node whose Presences list no device is one too.
func (j *Janitor) sweep(ctx context.Context, store Store, nodes cache.Store, queue workqueue.TypedInterface[string]) {
	named, err := store.Nodes(ctx)
	if err != nil {
		// Nodes returns what it could read: sweep that much.
		j.log.Warn("departed-node sweep: listing the nodes named", "err", err)
	}
	var gone []string
	for _, name := range named {
		if _, exists, _ := nodes.GetByKey(name); !exists {
			gone = append(gone, name)
			queue.Add(name)
		}
	}
	j.log.Info("departed-node sweep", "nodes", len(named), "departed", gone)
}

// next clears the next queued node; it returns false once the queue is
// shut down.
func (j *Janitor) next(ctx context.Context, store Store, queue workqueue.TypedRateLimitingInterface[string]) bool {
	name, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(name)
	if err := j.forgetIfGone(ctx, store, name); err != nil {
		if ctx.Err() == nil {
			j.log.Warn("clearing a departed node; will retry", "node", name, "err", err)
			queue.AddRateLimited(name)
		}
		return true
	}
	queue.Forget(name)
	return true
}

// forgetIfGone clears node's claims unless its Node object exists. The
// API server is asked, not the informer: a node deleted and registered
// again since the event (a reinstalled machine), or one newer than the
// informer's list, keeps its claims.
func (j *Janitor) forgetIfGone(ctx context.Context, store Store, node string) error {
	_, err := j.cfg.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case err == nil:
		j.log.Info("node exists again: its claims stay", "node", node)
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("looking up node %s: %w", node, err)
	}
	freed, err := store.ForgetNode(ctx, node)
	j.log.Info("cleared a departed node", "node", node, "freedSlots", freed, "err", err)
	if err != nil {
		return fmt.Errorf("clearing node %s: %w", node, err)
	}
	return nil
}
