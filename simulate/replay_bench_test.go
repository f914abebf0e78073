package simulate

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// writeDayLog writes a day of sluice access log: lines requests from
// consumers client addresses, picked at random, the lines as the gateway
// writes them.
func writeDayLog(tb testing.TB, path string, lines, consumers int) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	day := time.Date(2026, time.March, 9, 0, 0, 0, 0, time.UTC)
	step := 24 * time.Hour / time.Duration(lines)
	for i := range lines {
		c := rng.IntN(consumers)
		dur := 1 + rng.Float64()*40
		fmt.Fprintf(w, `{"time":%q,"level":"INFO","msg":"request","request_id":"%016x","route":"api","method":"GET","path":"/v1/items/%d","status":200,"duration_ms":%.3f,"client_ip":"10.%d.%d.%d","upstream":"http://10.0.0.5:8080"}`+"\n",
			day.Add(time.Duration(i)*step).Format(time.RFC3339Nano), rng.Uint64(), c%1000, dur, c>>16&255, c>>8&255, c&255)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkReplay replays a day: 1,000,000 log lines over 100,000
// consumers through all five algorithms, from reading the file to the
// results, as `sluice simulate -replay` does. The log is generated first,
// outside the timing.
func BenchmarkReplay(b *testing.B) {
	b.ReportAllocs()
	const lines, consumers = 1_000_000, 100_000
	path := filepath.Join(b.TempDir(), "access.log")
	writeDayLog(b, path, lines, consumers)
	p := Params{Limit: 10, Window: time.Minute, Queue: 5}
	cpu0 := cpuTime(b)
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		tr, rep, err := ReadLog(f, ReplayOptions{Key: []string{"ip"}})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		if rep.Requests != lines || len(rep.Bad) != 0 || len(tr.Keys) < consumers*99/100 {
			b.Fatalf("got %d requests, %d bad lines, %d consumers; want %d, 0, about %d", rep.Requests, len(rep.Bad), len(tr.Keys), lines, consumers)
		}
		rs, err := Simulate(p, tr, Options{Consumers: true})
		if err != nil {
			b.Fatal(err)
		}
		if rs[0].Accepted+rs[0].Rejected != lines {
			b.Fatalf("got %d decisions, want %d", rs[0].Accepted+rs[0].Rejected, lines)
		}
	}
	// On a shared machine the wall time moves with the neighbours' load;
	// the CPU time spent, on all cores together, much less.
	b.ReportMetric((cpuTime(b)-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

// cpuTime is the CPU time the process has used so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadLog is the reading alone, for comparison.
func BenchmarkReadLog(b *testing.B) {
	b.ReportAllocs()
	const lines, consumers = 1_000_000, 100_000
	path := filepath.Join(b.TempDir(), "access.log")
	writeDayLog(b, path, lines, consumers)
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		_, rep, err := ReadLog(f, ReplayOptions{Key: []string{"ip"}})
		f.Close()
		if err != nil || rep.Requests != lines {
			b.Fatalf("got %d requests, error %v; want %d", rep.Requests, err, lines)
		}
	}
}
