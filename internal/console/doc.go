// Package console is Switchyard's web console: a static page, stylesheet
// and script embedded in the binary (go:embed) and served by the admin
// endpoint at / and /console/. The page reads and acts through the admin
// API only (/api/v1/..., and /api/status where /api/v1/status is not
// served), sending the bearer token the user typed; the package itself
// holds no state, reads no store and changes nothing.
package console
