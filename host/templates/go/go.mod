module example.com/{name}

go 1.27.1

require kclhost.dev/kcl v0.0.0

require go.bytecodealliance.org/pkg v0.4.0 // indirect

// The kcl-host Go SDK, copied into kcl/ by `kcl-host init` (or a checkout, with --sdk), and the
// bindings' runtime, which kcl/scripts/build-go.sh installs into kcl/tools on first use.
replace kclhost.dev/kcl => {sdk}/guest-sdk/go

replace go.bytecodealliance.org/pkg => {sdk}/tools/go/pkg
