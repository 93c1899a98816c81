// Command switchyard is the single binary of Switchyard: the proxy, the
// controller, the embedded topology store, the operator commands and the local
// MariaDB sandbox. Domain code lives under internal/; this package only parses
// flags, loads and validates config and wires the parts together.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "switchyard:", ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "switchyard:", err)
		os.Exit(1)
	}
}

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
