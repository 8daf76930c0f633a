module example.com/{name}

go 1.27.1

require kclhost.dev/kcl v0.0.0

require go.bytecodealliance.org/pkg v0.4.0 // indirect

// The kcl-host Go SDK and the bindings' runtime, from the kcl-host checkout that made this project.
replace kclhost.dev/kcl => {sdk}/guest-sdk/go

replace go.bytecodealliance.org/pkg => {sdk}/tools/go/pkg
