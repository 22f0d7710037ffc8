// Command kvindex is the CLI of kvindex: a thin urfave/cli shell over the library packages.
// Every flag can also be set from the environment as KVINDEX_<FLAG> (dashes become underscores).
//
// Exit codes: 0 success, 1 failure (one-line reason on stderr), 2 usage error.
//
// Commands: serve (the service), compact / export / inspect / verify (offline, package offline),
// bench / loadgen (package bench). Each command's logic lives in a package that tests call
// directly; this package only parses flags, wires logging and signals, and maps errors to exit
// codes. Its end-to-end tests build the real binary and drive it over HTTP (SIGKILL, restart,
// two-process recovery).
package main
