package certs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestZapLoggerWritesToSlog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		level     slog.Level // the slog handler's level
		log       func(*zap.Logger)
		wantLevel string // "" when nothing should be written
		wantMsg   string
		wantAttrs map[string]any
	}{
		{"error keeps level and error text", slog.LevelInfo,
			func(l *zap.Logger) {
				l.Error("will retry", zap.Error(errors.New("dial tcp: connection refused")), zap.Int("attempt", 1), zap.Duration("retrying_in", time.Minute))
			},
			"ERROR", "will retry", map[string]any{"error": "dial tcp: connection refused", "attempt": float64(1), "retrying_in": "1m0s", "logger": "obtain"}},
		{"leading dot of logger name dropped", slog.LevelInfo,
			func(l *zap.Logger) { l.Named(".acme_client").Warn("HTTP request failed; retrying") },
			"WARN", "HTTP request failed; retrying", map[string]any{"logger": "acme_client"}},
		{"warn", slog.LevelInfo,
			func(l *zap.Logger) { l.Warn("stapling OCSP", zap.String("identifier", "a.test")) },
			"WARN", "stapling OCSP", map[string]any{"identifier": "a.test"}},
		{"client-caused warn demoted to debug", slog.LevelInfo,
			func(l *zap.Logger) { l.Warn("looking up info for HTTP challenge", zap.String("identifier", "a.test")) },
			"", "", nil},
		{"routine info demoted below info", slog.LevelInfo,
			func(l *zap.Logger) { l.Info("acquiring lock", zap.String("identifier", "a.test")) },
			"", "", nil},
		{"routine info visible at debug", slog.LevelDebug,
			func(l *zap.Logger) { l.Info("acquiring lock", zap.String("identifier", "a.test")) },
			"DEBUG", "acquiring lock", map[string]any{"identifier": "a.test"}},
		{"life-cycle info kept", slog.LevelInfo,
			func(l *zap.Logger) { l.Info("new ACME account registered", zap.String("status", "valid")) },
			"INFO", "new ACME account registered", map[string]any{"status": "valid"}},
		{"an error any client causes goes to debug", slog.LevelInfo,
			func(l *zap.Logger) {
				l.Error("tls-alpn challenge", zap.String("server_name", "attacker-chosen.test"), zap.Error(errors.New("no active ACME challenge")))
			},
			"", "", nil},
		{"an obtain cut short by Stop goes to debug", slog.LevelInfo,
			func(l *zap.Logger) {
				l.Error("job failed", zap.Error(fmt.Errorf("a.test: obtaining certificate: %w", context.Canceled)))
			},
			"", "", nil},
		{"an obtain cut short by Stop visible at debug", slog.LevelDebug,
			func(l *zap.Logger) {
				l.Error("job failed", zap.Error(fmt.Errorf("a.test: obtaining certificate: %w", context.Canceled)))
			},
			"DEBUG", "job failed", map[string]any{"error": "a.test: obtaining certificate: context canceled"}},
		{"with fields carried", slog.LevelInfo,
			func(l *zap.Logger) { l.With(zap.String("ca", "https://ca.test/dir")).Error("job failed") },
			"ERROR", "job failed", map[string]any{"ca": "https://ca.test/dir"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logger, buf := newTestLogger(tc.level)
			zl := newZapLogger(logger.Handler())
			if strings.Contains(tc.name, "error keeps") {
				zl = zl.Named("obtain")
			}
			tc.log(zl)
			out := strings.TrimSpace(buf.String())
			if tc.wantLevel == "" {
				if out != "" {
					t.Errorf("output: got %s, want none", out)
				}
				return
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(out), &rec); err != nil {
				t.Fatalf("decoding %q: %v", out, err)
			}
			if rec["level"] != tc.wantLevel || rec["msg"] != tc.wantMsg {
				t.Errorf("record: got level %v msg %v, want %s %q", rec["level"], rec["msg"], tc.wantLevel, tc.wantMsg)
			}
			for k, v := range tc.wantAttrs {
				if rec[k] != v {
					t.Errorf("attr %s: got %v, want %v", k, rec[k], v)
				}
			}
		})
	}
}
