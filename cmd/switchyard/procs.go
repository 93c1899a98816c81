package main

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
)

// setProcs applies proxy.gomaxprocs (n) to the process: n when positive;
// for 0, when the process runs only the proxy (alone: `switchyard proxy`),
// half the processors Go chose by default (the CPUs, or the cgroup's
// limit), at least 1, unless the GOMAXPROCS environment variable set
// them; for 0 in a process that also runs the controller or the embedded
// etcd (`switchyard up`), Go's default, so failure detection and the
// store never wait behind the proxy's sessions for a processor. A proxy's sessions wait for their client and their backend
// twice per query; with a processor idle, every wake also starts a
// second thread looking for work, which costs CPU and context switches
// per query without relaying anything (README "Proxy throughput").
func setProcs(log *slog.Logger, n int, alone bool) {
	procsMu.Lock()
	defer procsMu.Unlock()
	if procsSet && n == procsLast {
		return // a config change elsewhere: nothing to do (each change stops the world)
	}
	procsSet, procsLast = true, n
	if n == 0 && (os.Getenv("GOMAXPROCS") != "" || !alone) {
		if !alone && os.Getenv("GOMAXPROCS") == "" {
			runtime.SetDefaultGOMAXPROCS()
		}
		return
	}
	prev := runtime.GOMAXPROCS(0)
	want := n
	if want == 0 {
		runtime.SetDefaultGOMAXPROCS()
		want = max(1, runtime.GOMAXPROCS(0)/2)
	}
	runtime.GOMAXPROCS(want)
	if prev != want {
		log.Info("processors for Go code", "gomaxprocs", want, "configured", n, "cpus", runtime.NumCPU())
	}
}

// The proxy.gomaxprocs last applied.
var (
	procsMu   sync.Mutex
	procsSet  bool
	procsLast int
)
