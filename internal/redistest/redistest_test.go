package redistest

import (
	"strings"
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if got := s.Do("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: got %q, want OK", got)
	}
	if got := s.Do("GET", "k"); got != "v" {
		t.Fatalf("GET: got %q, want v", got)
	}
	s.Kill()
	if _, err := Command(s.Addr(), "PING"); err == nil {
		t.Fatal("PING after Kill: got nil error, want a connection error")
	}
	s.Restart()
	if got := s.Do("GET", "k"); got != "" {
		t.Fatalf("GET after Restart: got %q, want empty (no persistence)", got)
	}
}

func TestStartArgs(t *testing.T) {
	s := Start(t, "--maxmemory-policy", "noeviction")
	if got := s.Do("CONFIG", "GET", "maxmemory-policy"); got != "maxmemory-policy\nnoeviction" {
		t.Fatalf("CONFIG GET: got %q, want maxmemory-policy noeviction", got)
	}
}

func TestStartCluster(t *testing.T) {
	addrs := StartCluster(t, 3)
	if len(addrs) != 3 {
		t.Fatalf("got %d addresses, want 3", len(addrs))
	}
	for _, a := range addrs {
		info, err := Command(a, "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "cluster_known_nodes:3") {
			t.Errorf("%s: got %q, want cluster_known_nodes:3", a, info)
		}
	}
}

func TestPauseResume(t *testing.T) {
	s := Start(t)
	s.Pause()
	if _, err := command(s.Addr(), 200*time.Millisecond, "PING"); err == nil {
		t.Fatal("PING while paused: got an answer, want a timeout")
	}
	s.Resume()
	if got := s.Do("PING"); got != "PONG" {
		t.Fatalf("PING after Resume: got %q, want PONG", got)
	}
}

func TestStartSentinel(t *testing.T) {
	m := Start(t)
	addr := StartSentinel(t, m.Addr(), "main")
	got, err := Command(addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(m.Addr(), ":", "\n", 1); got != want {
		t.Errorf("got master %q, want %q", got, want)
	}
}
