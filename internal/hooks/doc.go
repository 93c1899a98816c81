// Package hooks delivers the controller's notifications to operators'
// commands and URLs: failover and switchover start and end, a dead primary
// that needs an operator, alarms raised and cleared, quarantined nodes.
//
// A Dispatcher owns one bounded queue and one worker per configured hook.
// Notify never blocks: a delivery that does not fit in the queue is dropped
// and counted. Each attempt runs under the hook's timeout and a failed one
// is retried with a doubling backoff; every attempt's result is counted in
// switchyard_hook_runs_total{hook,result} and passed to Options.OnResult
// (the controller writes it to the event log as hook_ok or hook_failed).
// Veto runs the veto hooks of an event synchronously, once each, before a
// failover or switchover acts; a failure refuses the action.
//
// The package must not decide anything about a cluster, and nothing in it
// may wait on a hook except Veto: the controller calls Notify from its
// probe loop and its recoveries. Only the leader controller holds a
// Dispatcher (one per term of leadership), so a hook runs once per event.
//
// The model is orchestrator's PreFailoverProcesses/PostFailoverProcesses
// (commands with placeholders; here the payload on stdin and SWITCHYARD_*
// variables), Patroni's callbacks (argv, no shell) and MaxScale's monitor
// script/events.
package hooks
