// Command floor is the benchmark floor: a Go binary that prints one JSON
// object and exits, built like the plugins. An exec of it is the least a
// plugin call can cost on this machine.
package main

import "os"

func main() { os.Stdout.WriteString(`{"cdiVersion":"0.1.0"}` + "\n") }
