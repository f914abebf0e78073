package redisstore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine they started is
// still running after the last one. Not counted: the goroutine with which
// rueidis closes, 5 s later, the connections of cluster nodes a topology
// refresh dropped (a cluster that has just formed is often seen changing
// once); it ends on its own and holds nothing of the store's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}
