package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// clusterTitle begins the table; TestRun looks for it.
const clusterTitle = "Cluster simulation:"

// clusterResult is the simulation's figures.
type clusterResult struct {
	o    clusterOptions
	took time.Duration
	// observed is when every node's Observe had returned; setupTook when
	// every store showed every node in every Instance.
	observed, setupTook time.Duration
	failedPasses        int // Observe passes that ran out of conflict retries
	setup               load
	objectBytes         int
	memBefore, memSetup memFigures
	memStarted          memFigures // the stores started, the namespace empty
	memClaims           memFigures
	claimsTook          time.Duration
	claimsLoad          load
	alloc               allocResult
	sweep               sweepResult
	released            int
	releaseLoad         load
	releaseTook         time.Duration
	scoped              scopedResult
	startup             startupResult
}

// printCluster prints the simulation as one table.
func printCluster(w io.Writer, r clusterResult) {
	o := r.o
	fmt.Fprintf(w, "\n%s %d nodes' kube stores (each with its own client and node name, as a node's bridge has; all in\n", clusterTitle, o.nodes)
	fmt.Fprintf(w, "this process) share %d Instances of capacity %d through one kube-apiserver and etcd; %v in all\n", o.instances, o.capacity, r.took.Round(time.Second))
	tw := newTable(w)
	fmt.Fprintln(tw, "phase\tfigure\tvalue\tper unit\tverdict")
	row := func(phase, figure, value, per, verdict string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", phase, figure, value, per, verdict)
	}
	setupRows(row, r)
	claimRows(row, r)
	memoryRows(row, r)
	sweepRows(row, r)
	row("release", "releases / API writes (conflict retries)", fmt.Sprintf("%d / %d (%d)", r.released,
		r.releaseLoad.writes, r.releaseLoad.conflicts), fmt.Sprintf("in %s", secs(r.releaseTook)), "-")
	cpuRow(row, "release", r.releaseLoad)
	row("release", "slots left claimed, in every store's view and the API's", "none (checked)", "", "-")
	scopedRows(row, r.scoped)
	startupRows(row, r.startup)
	tw.Flush()
	fmt.Fprintln(w, "requests: every request of every node's client (its informers' included), sorted by verb: GET of one object,")
	fmt.Fprintln(w, "LIST of Instances or Presences, WATCH (streams opened), writes (PUT, POST, DELETE); watch events and bytes are those the clients read,")
	fmt.Fprintln(w, "one event per line of the streams. Propagation: from a Claim's return until the last other store's view shows")
	fmt.Fprintln(w, "it, each store checked on its Changes() feed (a Get on each wake-up, no poll), so scheduling delay on this")
	fmt.Fprintln(w, "machine's 2 cores is included; negative = before the return. target: 1 write that goes through per allocation,")
	fmt.Fprintln(w, "conflict retries aside. MB = 10^6 bytes, KB = 10^3.")
}

type rowFunc func(phase, figure, value, per, verdict string)

func setupRows(row rowFunc, r clusterResult) {
	o, l := r.o, r.setup
	row("setup", fmt.Sprintf("every node Observes all %d Instances at once: returned", o.instances), secs(r.observed), "", "-")
	row("setup", "until every store lists every Instance, seen by its node", secs(r.setupTook), "", "-")
	row("setup", "Observe passes that ran out of conflict retries, then passed again", fmt.Sprint(r.failedPasses),
		fmt.Sprintf("of %d nodes", o.nodes), "-")
	row("setup", "API writes (conflict retries)", fmt.Sprintf("%d (%d)", l.writes, l.conflicts),
		fmt.Sprintf("%.3f per node and Instance", float64(l.writes)/float64(o.nodes*o.instances)), "-")
	row("setup", "requests GET / LIST / WATCH / writes", requestCells(l.reqs, 1), closedCell(l), "-")
	row("setup", "watch events received, all nodes", fmt.Sprint(l.reqs.events),
		fmt.Sprintf("%.2f per write that went through", perThrough(l.reqs.events, l)), "-")
	cpuRow(row, "setup", l)
}

// cpuRow is a phase's CPU time, and what it comes to per write and per
// watch event.
func cpuRow(row rowFunc, phase string, l load) {
	c := l.cpu
	row(phase, "CPU s: kube-apiserver / etcd / this process (the stores)", fmt.Sprintf("%.1f / %.1f / %.1f",
		c.apiserver.Seconds(), c.etcd.Seconds(), c.bench.Seconds()),
		fmt.Sprintf("%.2f ms apiserver per write; %.0f µs here per event", c.apiserver.Seconds()*1e3/float64(max(l.writes, 1)),
			float64(c.bench.Microseconds())/float64(max(l.reqs.events, 1))), "-")
}

func claimRows(row rowFunc, r clusterResult) {
	o, a, l := r.o, r.alloc, r.claimsLoad
	n := float64(a.allocated)
	row("claims", fmt.Sprintf("claims, %d in flight: allocated / refused (ErrSlotTaken)", o.inFlight),
		fmt.Sprintf("%d / %d", a.allocated, a.refused), fmt.Sprintf("in %s", secs(r.claimsTook)), "-")
	through := float64(a.writes-a.conflicts) / n
	row("claims", "API writes per allocation (conflict retries)", fmt.Sprintf("%.3f (%.3f), max %d", float64(a.writes)/n,
		float64(a.conflicts)/n, a.maxWrites), fmt.Sprintf("%.3f went through", through),
		judge(a.writes-a.conflicts == a.allocated, fmt.Sprintf("%.3f writes went through per allocation", through)))
	row("claims", "requests per allocation GET / LIST / WATCH / writes", requestCells(l.reqs, n),
		"refused claims' included; "+closedCell(l), "-")
	row("claims", "watch events received per allocation", fmt.Sprintf("%.1f", float64(l.reqs.events)/n),
		fmt.Sprintf("%.2f per write that went through", perThrough(l.reqs.events, l)), "-")
	row("claims", "watch bytes received per allocation", fmt.Sprintf("%.1f KB", float64(l.reqs.bytes[reqWatch])/n/1e3),
		fmt.Sprintf("%.0f bytes per event", float64(l.reqs.bytes[reqWatch])/float64(max(l.reqs.events, 1))), "-")
	row("claims", "Claim call median / p99 / max", fmt.Sprintf("%s / %s / %s ms", ms(percentile(a.took, 50)),
		ms(percentile(a.took, 99)), ms(percentile(a.took, 100))), "", "-")
	row("claims", "propagation to every other store median / p99 / max", fmt.Sprintf("%s / %s / %s ms",
		ms(percentile(a.prop, 50)), ms(percentile(a.prop, 99)), ms(percentile(a.prop, 100))),
		fmt.Sprintf("%d of %d before the return", a.early, a.allocated), "-")
	cpuRow(row, "claims", l)
}

func memoryRows(row rowFunc, r clusterResult) {
	before, started, set, claims := r.memBefore, r.memStarted, r.memSetup, r.memClaims
	m := float64(r.o.instances)
	row("memory", "kube-apiserver VmRSS: no stores / stores started / set up / after claims", fmt.Sprintf("%s / %s / %s / %s MB",
		mb(before.apiserver), mb(started.apiserver), mb(set.apiserver), mb(claims.apiserver)),
		"freed heap goes back to the OS lazily", "-")
	row("memory", "etcd VmRSS: no stores / stores started / set up / after claims", fmt.Sprintf("%s / %s / %s / %s MB",
		mb(before.etcd), mb(started.etcd), mb(set.etcd), mb(claims.etcd)), "", "-")
	n := float64(r.o.nodes)
	empty := (float64(started.heap) - float64(before.heap)) / n
	full := (float64(set.heap) - float64(before.heap)) / n
	perInstance := (full - empty) / m
	row("memory", fmt.Sprintf("this process's heap per store: started / set up (one bridge's informer of %d Instances)", r.o.instances),
		fmt.Sprintf("%.2f / %.2f MB", empty/1e6, full/1e6), fmt.Sprintf("%.1f KB per Instance", perInstance/1e3), "-")
	row("memory", fmt.Sprintf("one Instance as JSON from the API (%d nodes, slots free)", r.o.nodes),
		fmt.Sprintf("%d bytes", r.objectBytes), fmt.Sprintf("heap per Instance = %.1f x this", perInstance/float64(max(r.objectBytes, 1))), "-")
}

func sweepRows(row rowFunc, r clusterResult) {
	s := r.sweep
	row("sweep", fmt.Sprintf("ForgetNode(%s): Instances naming it / API writes / slots freed", s.node),
		fmt.Sprintf("%d / %d / %d", s.touched, s.load.writes, s.freed),
		fmt.Sprintf("%.2f writes per Instance", float64(s.load.writes)/float64(max(s.touched, 1))), "-")
	row("sweep", "ForgetNode call / its return to every other store's view", fmt.Sprintf("%s / %s ms",
		secs(s.took), ms(s.prop)), "", "-")
	row("sweep", "watch events received, all nodes", fmt.Sprint(s.load.reqs.events),
		fmt.Sprintf("%.2f per write that went through", perThrough(s.load.reqs.events, s.load)), "-")
	cpuRow(row, "sweep", s.load)
}

// closedCell says how many watch streams the API server closed because
// their client did not keep up; each WATCH beyond the first is one.
func closedCell(l load) string {
	return fmt.Sprintf("%d watches closed as unresponsive", l.closed)
}

// requestCells are the counts of each kind, divided by n.
func requestCells(c requestCounts, n float64) string {
	cells := make([]string, numKinds)
	for k := range numKinds {
		if n == 1 {
			cells[k] = fmt.Sprint(c.n[k])
		} else {
			cells[k] = fmt.Sprintf("%.3f", float64(c.n[k])/n)
		}
	}
	return strings.Join(cells, " / ")
}

// perThrough is events per write that went through: a conflicting write
// changes nothing and sends no event.
func perThrough(events int64, l load) float64 {
	return float64(events) / float64(max(l.writes-l.conflicts, 1))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mb(b int64) string { return fmt.Sprintf("%.1f", float64(b)/1e6) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func judge(ok bool, miss string) string {
	if ok {
		return "met"
	}
	return "MISSED: " + miss
}

// percentile of d, p in [0, 100], nearest rank; d is sorted in place.
func percentile[T cmp.Ordered](d []T, p int) T {
	var zero T
	if len(d) == 0 {
		return zero
	}
	slices.Sort(d)
	return d[(len(d)-1)*p/100]
}

// scopedRows are the scoped phase's, when it ran.
func scopedRows(row func(phase, figure, value, per, verdict string), r scopedResult) {
	if r.others == 0 {
		return
	}
	verdict := "missed"
	if r.heap < 20e6 && r.listed == scopedDevices && r.events == 0 {
		verdict = "met"
	}
	row("scoped", fmt.Sprintf("a node serving a local pool of %d, %d Instances of other pools: Instances it lists", scopedDevices, r.others),
		fmt.Sprint(r.listed), fmt.Sprintf("started and observed in %s", secs(r.took)), "-")
	row("scoped", "heap its store added / events it heard while the others were all written again",
		fmt.Sprintf("%.2f MB / %d", float64(r.heap)/1e6, r.events), "target: under 20 MB, 0 events", verdict)
}
