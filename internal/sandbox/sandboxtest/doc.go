// Package sandboxtest starts real MariaDB sandboxes for integration tests:
// a fresh cluster per call in the test's temporary directory, on free
// loopback ports, stopped (by pid) and removed when the test ends. It skips
// tests when mariadbd is not installed unless SWITCHYARD_REQUIRE_MARIADB=1,
// in which case a missing server fails the test. It never mocks the server.
package sandboxtest
