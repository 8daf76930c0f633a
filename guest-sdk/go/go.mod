module kclhost.dev/kcl

go 1.27.1

require go.bytecodealliance.org/pkg v0.4.0

// The runtime package of wit-bindgen's Go bindings is not on the Go module
// proxy; scripts/go-toolchain.sh unpacks it from the wit-bindgen-go crate.
replace go.bytecodealliance.org/pkg => ../../tools/go/pkg
