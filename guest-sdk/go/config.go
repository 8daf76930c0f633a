package kcl

import (
	"kclhost.dev/kcl/internal/wit/imports/wasi_config_store"
)

// Var returns the variable key the operator set (kcl-host run --var
// KEY=VALUE), read through wasi:config/store, and whether it is set.
func Var(key string) (string, bool) {
	result := wasi_config_store.Get(key)
	if result.IsErr() || result.Ok().IsNone() {
		return "", false
	}
	return result.Ok().Some(), true
}
