module github.com/cdiexec/cdi

go 1.26.0

require (
	github.com/gofrs/flock v0.13.1
	github.com/tidwall/gjson v1.20.0
	google.golang.org/grpc v1.85.0
	k8s.io/kubelet v0.36.3
)

require (
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
