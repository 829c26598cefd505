// Package bench holds the plugins' benchmarks, in its tests alone.
// BenchmarkPlugins measures the plugins as a runtime uses them, every
// figure against floors measured in the same run on the same machine:
//
//   - ADD+DEL round trip (two real execs) per plugin, against the floor
//     (two execs of a trivial Go binary printing one JSON object, built
//     with the plugins' flags, source in testdata/floor) and against CNI's
//     host-local IPAM plugin doing its own ADD+DEL, installed from the Go
//     module proxy at the newest version the proxy lists;
//   - the same round trip of a second floor, the state floor (testdata/
//     statefloor): the first floor plus only what SPEC.md requires of every
//     saved change (boot id, flock, read, write, fsync, rename), so that the
//     table shows how far each plugin is from the least it could cost
//     (reported, no longer a target);
//   - 64 processes doing ADD then DEL of generic-tty at once on one state
//     file: operations per second, the ADD outcomes, a ledger proving no
//     terminal was handed out twice, and an empty LIST at the end;
//   - with each ratio to the state floor, its 95% bootstrap interval over
//     the rounds, the spread within the run rather than one median;
//   - beside each round trip's time, its processes' CPU time (user and
//     system, from getrusage) and its ratio to host-local's: the time less
//     the CPU is waiting, for the fsync every saved change makes and for a
//     turn on a busy machine, and it is the waiting that grows with the
//     load, so that the CPU ratio says what a plugin's own code costs
//     when the time's verdict turns with the load;
//   - where each plugin's ADD+DEL goes, so that a missed target comes with
//     its cause: VERSION, ADD and DEL each timed alone, split into the two
//     execs any binary pays (the floor's), the plugin's start-up beyond
//     them (VERSION reads no stdin and touches no state) and its work,
//     with the page faults of each call beside the times, and the faults
//     above the floor's priced at what a fresh page costs on this machine:
//     the difference between the floor and a third floor (testdata/
//     pagefloor) that writes to 256 fresh pages, over the difference in
//     their faults. Exec and page faults cost very differently between
//     machines, virtual ones especially, which moves every ratio here;
//     the price says how much of a plugin's excess is memory it maps in;
//   - each plugin binary's size, and whether its build info lists grpc or
//     client-go, which a plugin must never link.
//
// Every binary is timed as an installed copy, the way `make install`,
// cdi-install and `go install` place binaries, not as the file the linker
// wrote (installCopy says why).
//
// The subjects of the round-trip table are measured interleaved, one round
// of each in turn, so that a machine that slows down or speeds up during
// the run shifts every column alike instead of biasing the ratios.
//
// `make bench` runs BenchmarkPlugins first, as
//
//	go test -run '^$' -bench '^BenchmarkPlugins$' -benchtime 1x ./plugins/bench
//
// with -rounds (200), -concurrent (3s) and -host-local (a version of
// github.com/containernetworking/plugins) to size it, flags of the test
// binary; progress goes to stderr, the tables to stdout. Then
// BenchmarkRoundTrip/subject=<subject> times the same round trips of the
// floor, the state floor, host-local (skipped when the module proxy cannot
// provide it) and each plugin, and BenchmarkStartup/subject=<subject> one
// exec of the floor and each plugin's VERSION, one subject after another;
// benchstat -col /subject sets each against the floor.
//
// Targets (ADD+DEL median below host-local's; no grpc or client-go
// linked; the earlier ones, 1.5x the floor and then 1.15x the state
// floor, are retired) are judged in the table's verdict column, not by
// failing, because a slow or noisy machine should not turn a measurement
// into a failure. A double handout or an allocation left after every DEL
// is a correctness failure and fails the benchmark, as does any plugin
// call that fails unexpectedly.
package bench
