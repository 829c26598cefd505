// Command bench measures the plugins as a runtime uses them, every figure
// against floors measured in the same run on the same machine:
//
//   - ADD+DEL round trip (two real execs) per plugin, against the floor
//     (two execs of a trivial Go binary printing one JSON object, built
//     with the plugins' flags) and against CNI's host-local IPAM plugin
//     doing its own ADD+DEL (installed from the Go module proxy);
//   - 64 processes doing ADD/DEL at once on one state file: operations per
//     second, and a ledger proving no unit was handed out twice;
//   - each plugin binary's size, and that it links neither grpc nor
//     client-go.
//
// Run it with `make bench` (or `go run ./plugins/internal/bench -n 500`).
// Targets (ADD+DEL median at most 1.5x the floor, below host-local) are
// reported in the table, not enforced by the exit status: a slow or noisy
// machine should not turn a measurement into a failure. A double handout
// is a correctness failure and exits 1.
package main
