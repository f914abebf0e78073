package simulate

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestGiveUpHandsPlaceDown: a waiter whose client goes away before its
// departure never reaches the upstream and gives its place to those
// behind, who leave one interval earlier, as the gateway's store moves
// them; one gone at its departure itself leaves its place spent. Other
// algorithms, which queue nothing, forward it at once.
func TestGiveUpHandsPlaceDown(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	p := Params{Limit: 1, Window: time.Second, Queue: 3}
	traffic := func(giveUp time.Duration) *Traffic {
		return &Traffic{Origin: Origin(time.Second), Keys: []string{"a"}, Requests: []Request{
			{At: 0}, {At: 50 * ms, GiveUp: giveUp}, {At: 150 * ms}, {At: 250 * ms}, {At: 750 * ms},
		}}
	}
	for _, tc := range []struct {
		name             string
		giveUp           time.Duration
		accepted, queued int
		departures       []time.Duration
	}{
		{"before its departure", 300 * ms, 4, 3, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}},
		{"at its departure", 950 * ms, 3, 2, []time.Duration{0, 2 * time.Second, 3 * time.Second}},
		{"after its departure", 2 * time.Second, 4, 3, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := Simulate(p, traffic(tc.giveUp), Options{Departures: true, Algorithms: []ratelimit.Algorithm{ratelimit.LeakyBucket, ratelimit.FixedWindow}})
			if err != nil {
				t.Fatal(err)
			}
			lb := rs[0]
			if lb.Accepted != tc.accepted || lb.Queued != tc.queued || !slices.Equal(lb.Departures, tc.departures) {
				t.Errorf("leaky_bucket: got accepted %d, queued %d, departures %v; want %d, %d, %v", lb.Accepted, lb.Queued, lb.Departures, tc.accepted, tc.queued, tc.departures)
			}
			if fw := rs[1]; fw.Accepted != 1 || fw.Rejected != 4 {
				t.Errorf("fixed_window: got accepted %d, rejected %d; want 1, 4", fw.Accepted, fw.Rejected)
			}
		})
	}
}
