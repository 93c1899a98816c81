package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerPaths(t *testing.T) {
	h := Handler()
	cases := []struct {
		method, path string
		code         int
		ctype, body  string
	}{
		{"GET", "/", 200, "text/html", `src="/console/app.js"`},
		{"GET", "/console/", 200, "text/html", `id="banner-stale"`},
		{"GET", "/console", 200, "text/html", `<title>Switchyard console</title>`},
		{"HEAD", "/console/", 200, "text/html", ""},
		{"GET", "/console/app.js", 200, "text/javascript", "/api/v1/status"},
		{"GET", "/console/app.css", 200, "text/css", ".banner-stale"},
		{"GET", "/console/missing.js", 404, "", ""},
		{"GET", "/console/../console.go", 404, "", ""},
		{"GET", "/api/v1/status", 404, "", ""},
		{"GET", "/index.html", 404, "", ""},
		{"POST", "/", 405, "", ""},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(c.method, "http://admin"+c.path, nil)
		h.ServeHTTP(rec, req)
		res := rec.Result()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != c.code {
			t.Errorf("%s %s: status %d, want %d", c.method, c.path, res.StatusCode, c.code)
			continue
		}
		if c.code != 200 {
			continue
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, c.ctype) {
			t.Errorf("%s %s: Content-Type %q, want %s", c.method, c.path, ct, c.ctype)
		}
		if !strings.Contains(string(body), c.body) {
			t.Errorf("%s %s: body lacks %q", c.method, c.path, c.body)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s %s: Content-Security-Policy %q", c.method, c.path, csp)
		}
	}
}

// The page loads its script and styles from files (the CSP forbids inline
// code) and names only endpoints of the admin API.
func TestPageHasNoInlineCode(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	page := rec.Body.String()
	for _, bad := range []string{"<script>", "onclick=", "style=\"", "http://", "https://"} {
		if strings.Contains(page, bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
}
