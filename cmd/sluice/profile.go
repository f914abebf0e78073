package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profileEnv names the file a CPU profile of the whole run is written to.
// `make pgo` sets it to refresh default.pgo, the profile every go build of
// this package is optimised with (README › Performance).
const profileEnv = "SLUICE_CPU_PROFILE"

// startProfile starts a CPU profile when lookup (os.LookupEnv) finds
// profileEnv set; stop writes it out. With none set, stop does nothing.
func startProfile(lookup func(string) (string, bool)) (stop func() error, err error) {
	path, ok := lookup(profileEnv)
	if !ok || path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("%s: %w", profileEnv, err)
		}
		return nil
	}, nil
}
