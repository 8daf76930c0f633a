module kclhost.dev/examples/json-aggregate

go 1.27.1

require (
	github.com/mailru/easyjson v0.9.2
	kclhost.dev/kcl v0.0.0
)

require (
	github.com/josharian/intern v1.0.0 // indirect
	go.bytecodealliance.org/pkg v0.4.0 // indirect
)

replace kclhost.dev/kcl => ../../../guest-sdk/go

replace go.bytecodealliance.org/pkg => ../../../tools/go/pkg
