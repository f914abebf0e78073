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

// TestValidateChecksLogLevel: validate takes run's flags, so a -log-level
// that run would refuse must not pass validate: a deploy that validates
// first would otherwise start a gateway that exits at once.
func TestValidateChecksLogLevel(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"validate", "-log-level", "loud", "-config", "../../config.example.yaml"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "-log-level") {
		t.Errorf("sluice validate -log-level loud: exit %d, stderr %q; want 1 naming -log-level", code, errOut.String())
	}
}
