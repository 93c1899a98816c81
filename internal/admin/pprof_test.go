package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPprofOffByDefault: /debug/pprof/ answers only with Options.Pprof
// (config admin.pprof), and then serves the heap and allocation profiles.
func TestPprofOffByDefault(t *testing.T) {
	get := func(addr, path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	off, err := Start(Options{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if code, _ := get(off.Addr(), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without admin.pprof: %d, want 404", code)
	}
	on, err := Start(Options{Address: "127.0.0.1:0", Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	defer on.Close()
	if code, body := get(on.Addr(), "/debug/pprof/"); code != 200 || !strings.Contains(body, "allocs") {
		t.Errorf("/debug/pprof/ with admin.pprof: %d %.80q", code, body)
	}
	if code, body := get(on.Addr(), "/debug/pprof/allocs?debug=1"); code != 200 || !strings.Contains(body, "# Mallocs = ") {
		t.Errorf("/debug/pprof/allocs: %d %.80q", code, body)
	}
}
