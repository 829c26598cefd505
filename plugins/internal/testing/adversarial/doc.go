// Package adversarial holds the tests that treat every plugin as an
// attacker or a clumsy operator would: a table of malformed input (stdin,
// environment, request, request-id, args), run against each plugin binary
// as a runtime runs it. Every row must end within its time limit with
// exactly one error document carrying the code SPEC.md gives, the right
// exit status, and no allocation made.
//
// The file-level attacks live beside the code they attack: links at the
// state's temporary, lock and state files and unsafe state directories
// (plugins/internal/store/disk), FIFOs among drop-ins (spec/invoke),
// colliding drop-ins (bridge/discovery), full disks
// (plugins/internal/store/disk, bridge/instance/local), and the fuzz
// targets for the state reader and the drop-in loader.
package adversarial
