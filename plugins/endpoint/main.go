// Command endpoint is the CDI plugin for devices reached over the network
// (IP cameras, OPC UA servers, ...) rather than through a device node.
// They are listed in the configuration, marked shared (every node of a
// cluster can reach them) and handed to a container as environment
// variables.
//
// Args, besides the engine's common ones (root, stateDir, capacity, cdiKind):
//
//	endpoints  list of {"id": device-id that is also a CDI device name (ends
//	           with a letter or digit), "url": "rtsp://10.0.0.5/stream",
//	           "env": {extra variables}, "properties": {free-form strings}}
//	envPrefix  variable prefix (default: the type upper-cased, e.g. CAMERA);
//	           each device sets <PREFIX>_URL and <PREFIX>_ID
//	probe      {"tcp": true, "timeoutMs": 200}: an endpoint is healthy only
//	           if a TCP connection to its host and port succeeds (default:
//	           no probe, always healthy)
//
// The only resource-spec served is the configuration's type.
package main

import (
	"github.com/cdiexec/cdi/plugins/internal/engine"
	"github.com/cdiexec/cdi/skel"
)

func main() { skel.Main(engine.Plugin(family())) }
