package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// assets is the static directory as the root of the served files.
var assets = mustSub(static, "static")

func mustSub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	return s
}

// Handler serves the console: the page at "/", "/console" and "/console/",
// and its assets at "/console/<file>" (GET and HEAD only; other methods are
// 405). Any other path is 404, so that a caller mounting it on a catch-all
// pattern does not answer API paths it does not serve with the page.
// Responses carry a Content-Security-Policy allowing only the page's own
// scripts, styles and same-origin requests, and are not cached by the
// browser without revalidation.
func Handler() http.Handler {
	index, err := fs.ReadFile(assets, "index.html")
	if err != nil {
		panic(err) // embedded at build time
	}
	files := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		p := r.URL.Path
		switch p {
		case "/", "/console", "/console/", "/console/index.html":
			h.Set("Content-Type", "text/html; charset=utf-8")
			http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(index))
			return
		}
		name, ok := strings.CutPrefix(p, "/console/")
		if !ok || name == "" || strings.Contains(name, "..") {
			http.NotFound(w, r)
			return
		}
		if st, err := fs.Stat(assets, name); err != nil || st.IsDir() {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}
