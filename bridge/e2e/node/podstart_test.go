package node

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// flagPodStartRounds sizes BenchmarkPodStart, as a flag of the test binary
// (go test passes on the flags it does not know itself).
var flagPodStartRounds = flag.Int("podstart-rounds", 20, "timed pods per path of BenchmarkPodStart, after one warm-up pod")

// podStartTarget is the most DRA's pod start may take, as a multiple of
// the device plugins', median and p90.
const podStartTarget = 1.2

// BenchmarkPodStart measures how long a pod takes from the client's
// Create call to the client's watch seeing its container running, for a
// pod that asks for one terminal of the same drop-in: through the device
// plugins (resources.limits cdi.local/tty-generic: 1), then, the bridge
// restarted with --dra-pools tty-generic, through DRA (a one-terminal
// claim template). Both pods are placed by kube-scheduler, by a
// nodeSelector. Each pod is deleted, and its device free again, before
// the next is created. Run it with -benchtime 1x: each iteration starts
// both paths' rounds again.
func BenchmarkPodStart(b *testing.B) {
	n := StartDRANode(b, requireNode(b).Sub("podstart"), false)
	rounds := *flagPodStartRounds
	var viaDP, viaDRA []time.Duration
	for i := range b.N {
		if i > 0 {
			n.switchBridge(b, false)
		}
		viaDP = append(viaDP, n.timePodStarts(b, fmt.Sprintf("dp-%d", i), rounds, false)...)
		n.switchBridge(b, true)
		viaDRA = append(viaDRA, n.timePodStarts(b, fmt.Sprintf("dra-%d", i), rounds, true)...)
	}
	dp, dra := summarize(viaDP), summarize(viaDRA)
	printPodStarts(dp, dra)
	b.ReportMetric(ms(dp.median), "dp-median-ms")
	b.ReportMetric(ms(dp.p90), "dp-p90-ms")
	b.ReportMetric(ms(dra.median), "dra-median-ms")
	b.ReportMetric(ms(dra.p90), "dra-p90-ms")
	b.ReportMetric(float64(dra.median)/float64(dp.median), "dra/dp-median")
	if r := float64(dra.median) / float64(dp.median); r > podStartTarget {
		b.Logf("DRA's median pod start is %.2fx the device plugins', over the target of %.1fx", r, podStartTarget)
	}
}

// switchBridge stops the bridge and starts it again serving the
// terminals through DRA, or as a device plugin.
func (n *DRANode) switchBridge(b *testing.B, viaDRA bool) {
	n.StopBridge(b)
	n.StartBridge(b, viaDRA)
}

// timePodStarts runs a warm-up pod, then rounds timed ones, one at a
// time, through DRA or the device plugins, and returns the timed ones'
// start times.
func (n *DRANode) timePodStarts(b *testing.B, prefix string, rounds int, viaDRA bool) []time.Duration {
	var took []time.Duration
	for i := range rounds + 1 {
		name := fmt.Sprintf("%s-%d", prefix, i)
		dir := n.Layout.Path("reports", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		limits, template := map[string]int64{domain + "/" + draPool: 1}, ""
		if viaDRA {
			limits, template = nil, oneTerminalTpl
		}
		d, err := n.timePodStart(b.Context(), newScheduledPod(name, dir, limits, template))
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			took = append(took, d)
		}
		if err := deletePod(b.Context(), n.Cluster.Client, PodNamespace, name); err != nil {
			b.Fatal(err)
		}
		if err := n.waitTerminalsFree(b.Context(), viaDRA); err != nil {
			b.Fatal(err)
		}
	}
	return took
}

// timePodStart creates the pod and returns the time from the Create call
// to the watch event that shows its container running.
func (n *DRANode) timePodStart(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, podStartWait)
	defer cancel()
	api := n.Cluster.Client.CoreV1().Pods(PodNamespace)
	sel := fields.OneTermEqualSelector("metadata.name", pod.Name).String()
	// From a list's version: a watch from "any" may be refused as too new
	// for the watch cache.
	list, err := api.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return 0, err
	}
	w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	start := time.Now()
	if _, err := api.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return 0, fmt.Errorf("watching pod %s: %w", pod.Name, apierrors.FromObject(ev.Object))
		}
		if p, ok := ev.Object.(*corev1.Pod); ok && running(p) {
			return time.Since(start), nil
		}
	}
	got, err := api.Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("pod %s not running within %v: %w", pod.Name, podStartWait, err)
	}
	return 0, fmt.Errorf("pod %s not running within %v:\n%s", pod.Name, podStartWait, describePod(n.Cluster.Client, got))
}

// waitTerminalsFree waits until every terminal is free again after a
// pod's deletion: through DRA, the pod's claim deleted (and so no longer
// allocated); through the device plugins, every terminal free in the
// kubelet and every slot of the pool's Instances released.
func (n *DRANode) waitTerminalsFree(ctx context.Context, viaDRA bool) error {
	ctx, cancel := context.WithTimeout(ctx, reclaimWait)
	defer cancel()
	last := ""
	for ; ctx.Err() == nil; time.Sleep(pollInterval) {
		if viaDRA {
			claims, err := n.Cluster.Client.ResourceV1().ResourceClaims(PodNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				last = err.Error()
				continue
			}
			if len(claims.Items) == 0 {
				return nil
			}
			last = fmt.Sprintf("claim %s left", claims.Items[0].Name)
			continue
		}
		free, err := freeDevices(ctx, n.PodResources, domain+"/"+draPool)
		insts, ierr := listInstances(ctx, n.Cluster.Dynamic, n.Cluster.Namespace)
		held := slices.ContainsFunc(insts, func(i Instance) bool { return i.Pool == draPool && i.FreeSlots() < len(i.Usage) })
		if err == nil && ierr == nil && len(free) == ttysOffered && !held {
			return nil
		}
		last = fmt.Sprintf("free in the kubelet %v (%v), a slot held: %v (%v)", free, err, held, ierr)
	}
	return fmt.Errorf("the terminals not free within %v of a pod's deletion: %s", reclaimWait, last)
}

// podStarts summarizes one path's start times.
type podStarts struct {
	rounds                int
	median, p90, min, max time.Duration
}

func summarize(d []time.Duration) podStarts {
	s := slices.Sorted(slices.Values(d))
	if len(s) == 0 {
		return podStarts{}
	}
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s)-1)+0.5))] }
	return podStarts{rounds: len(s), median: at(0.5), p90: at(0.9), min: s[0], max: s[len(s)-1]}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printPodStarts prints the table to the standard output (a benchmark's
// log is cut at ten lines): each path's figures, then DRA's as a multiple
// of the device plugins'.
func printPodStarts(dp, dra podStarts) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pod created -> container running (client's Create to its watch)\tpods\tmedian\tp90\tmin\tmax\t")
	row := func(name string, s podStarts) {
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%v\t%v\t\n", name, s.rounds, s.median.Round(time.Millisecond),
			s.p90.Round(time.Millisecond), s.min.Round(time.Millisecond), s.max.Round(time.Millisecond))
	}
	row("device plugin (limits cdi.local/tty-generic: 1)", dp)
	row("DRA (one-terminal claim template)", dra)
	fmt.Fprintf(tw, "DRA / device plugin (target <= %.1fx)\t\t%.2fx\t%.2fx\t\t\t\n", podStartTarget,
		float64(dra.median)/float64(dp.median), float64(dra.p90)/float64(dp.p90))
	tw.Flush()
}
