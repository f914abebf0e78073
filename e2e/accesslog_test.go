package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// accessLogConfig holds access lines in the buffer for an hour, so that
// only a flush writes them.
func accessLogConfig(up string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: ""
log: {flush_interval: 1h}
routes:
  - name: r
    upstream: %s
`, up)
}

func TestAccessLogFlushedOnSIGHUP(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	in := start(t, writeConfig(t, accessLogConfig(up.URL)))
	if resp, _ := do(t, nil, "GET", in.HTTP+"/before-hup", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("got %d, want 200", resp.StatusCode)
	}
	in.Signal(syscall.SIGHUP)
	if _, ok := in.WaitLog(10*time.Second, `"msg":"request"`, `"path":"/before-hup"`); !ok {
		t.Fatalf("SIGHUP did not write the waiting access line:\n%s", strings.Join(in.logs.Lines(), "\n"))
	}
}

func TestAccessLogFlushedOnShutdown(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	in := start(t, writeConfig(t, accessLogConfig(up.URL)))
	if resp, _ := do(t, nil, "GET", in.HTTP+"/before-term", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("got %d, want 200", resp.StatusCode)
	}
	if err := in.Stop(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	lines := in.logs.Lines()
	at := -1
	for i, l := range lines {
		if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"path":"/before-term"`) {
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("shutdown did not write the waiting access line:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[len(lines)-1], "sluice stopped") {
		t.Errorf("last line: got %s, want sluice stopped after the access lines", lines[len(lines)-1])
	}
}
