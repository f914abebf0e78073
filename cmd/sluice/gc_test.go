package main

import (
	"errors"
	"io/fs"
	"math"
	"runtime/debug"
	"testing"
)

// gcPercent returns the collector's current target.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// memoryLimit returns the runtime's current soft memory limit.
func memoryLimit() int64 { return debug.SetMemoryLimit(-1) }

// Without GOGC in the environment the gateway's default applies; with it,
// what the runtime made of it stays, even GOGC=100. A cgroup memory limit
// becomes a soft limit unless GOMEMLIMIT is set; none, "max" and cgroup
// v1's "unlimited" leave the runtime's own.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		env       map[string]string
		files     map[string]string
		wantGC    int
		wantLimit int64
	}{
		{"unset, no cgroup", nil, nil, defaultGOGC, math.MaxInt64},
		{"GOGC set to the runtime's default", map[string]string{"GOGC": "100"}, nil, 100, math.MaxInt64},
		{"cgroup v2 limit", nil, map[string]string{"/sys/fs/cgroup/memory.max": "536870912\n"}, defaultGOGC, 512 * mib * 9 / 10},
		{"cgroup v2 no limit", nil, map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}, defaultGOGC, math.MaxInt64},
		{"cgroup v1 limit", nil, map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n"}, defaultGOGC, 1024 * mib * 9 / 10},
		{"cgroup v1 unlimited", nil, map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, defaultGOGC, math.MaxInt64},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "100MiB"}, map[string]string{"/sys/fs/cgroup/memory.max": "536870912\n"}, defaultGOGC, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As the runtime starts without GOGC and GOMEMLIMIT (the
			// test sets what the runtime would have made of them).
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			read := func(path string) ([]byte, error) {
				if v, ok := tc.files[path]; ok {
					return []byte(v), nil
				}
				return nil, fs.ErrNotExist
			}
			tuneGC(lookup, read)
			if got := gcPercent(); got != tc.wantGC {
				t.Errorf("got GOGC %d, want %d", got, tc.wantGC)
			}
			if got := memoryLimit(); got != tc.wantLimit {
				t.Errorf("got memory limit %d, want %d", got, tc.wantLimit)
			}
		})
	}
	if _, ok := cgroupMemoryLimit(func(string) ([]byte, error) { return nil, errors.New("permission denied") }); ok {
		t.Error("unreadable cgroup files: got a limit, want none")
	}
}
