package spec

// The protocol's environment variables. The caller side (spec/invoke,
// the bridge) and the plugin side (skel) both name them from here: each
// depends on the protocol, not on the other.
const (
	EnvCommand         = "CDI_COMMAND"
	EnvVersion         = "CDI_VERSION"
	EnvRequest         = "CDI_REQUEST"
	EnvRequestID       = "CDI_REQUEST_ID"
	EnvNUMALocality    = "CDI_REQUEST_NUMA_LOCALITY"
	EnvRequestDevices  = "CDI_REQUEST_DEVICES"
	EnvValidRequestIDs = "CDI_VALID_REQUEST_IDS"
)

// The protocol's commands, upper-cased. CDI_COMMAND is matched
// case-insensitively (ASCII letters only).
const (
	CmdVersion = "VERSION"
	CmdInfo    = "INFO"
	CmdAdd     = "ADD"
	CmdDel     = "DEL"
	CmdList    = "LIST"
	CmdGC      = "GC"
)
