module kclhost.dev/examples/enrich

go 1.27.1

require kclhost.dev/kcl v0.0.0

require go.bytecodealliance.org/pkg v0.4.0 // indirect

replace kclhost.dev/kcl => ../../../guest-sdk/go

replace go.bytecodealliance.org/pkg => ../../../tools/go/pkg
