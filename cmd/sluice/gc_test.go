package main

import (
	"runtime/debug"
	"testing"
)

// gcPercent returns the collector's current target.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// Without GOGC in the environment the gateway's default applies; with it,
// what the runtime made of it stays, even GOGC=100.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct {
		name string
		env  map[string]string
		want int
	}{
		{"unset", nil, defaultGOGC},
		{"set to the runtime's default", map[string]string{"GOGC": "100"}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100) // as the runtime starts without GOGC, or with GOGC=100
			tuneGC(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if got := gcPercent(); got != tc.want {
				t.Errorf("got GOGC %d, want %d", got, tc.want)
			}
		})
	}
}
