package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpExitsZero: -h asks for help, which is no error: every command
// prints its usage and exits 0, as simulate always did. A flag it does not
// know stays a usage error.
func TestHelpExitsZero(t *testing.T) {
	for _, cmd := range []string{"run", "validate", "demo", "health", "simulate", "version"} {
		var out, errOut bytes.Buffer
		if code := run([]string{cmd, "-h"}, &out, &errOut); code != 0 {
			t.Errorf("sluice %s -h: exit %d, want 0 (stderr %q)", cmd, code, errOut.String())
		}
		if got := out.String() + errOut.String(); !strings.Contains(got, "sluice "+cmd) {
			t.Errorf("sluice %s -h printed no usage: %q", cmd, got)
		}
		if code := run([]string{cmd, "-no-such-flag"}, &out, &errOut); code == 0 {
			t.Errorf("sluice %s -no-such-flag: exit 0, want a usage error", cmd)
		}
	}
}

// TestDemoRefusesArguments: demo and version take flags only; a stray
// word is a usage error, not a command that runs and ignores it.
func TestDemoRefusesArguments(t *testing.T) {
	for _, cmd := range []string{"demo", "version"} {
		var out, errOut bytes.Buffer
		if code := run([]string{cmd, "extra"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unexpected argument "extra"`) {
			t.Errorf("sluice %s extra: exit %d, stderr %q; want 2 naming the argument", cmd, code, errOut.String())
		}
	}
}
