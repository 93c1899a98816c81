// Package loadgen drives a ledger workload through Switchyard's listeners and
// checks it: every write carries a unique id and records the server_id of the
// node that executed it, so a checker can prove that nothing acknowledged was
// lost, no id was issued twice, and where writes and reads landed. The demo,
// scenario tests and benchmarks use it. It talks only through database/sql.
package loadgen
