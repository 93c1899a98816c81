package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/switchyard-db/switchyard/internal/config"
)

func newConfigCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Validate configuration",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Check a config file: strict YAML (unknown keys are errors), defaults, cross-field rules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := config.ValidateFile(args[0])
			if err != nil {
				return exitError{code: 1, msg: err.Error()}
			}
			nodes := 0
			for _, cl := range c.Clusters {
				nodes += len(cl.Nodes)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: valid (%d clusters, %d nodes, %d listeners, %d users)\n",
				args[0], len(c.Clusters), nodes, len(c.Listeners), len(c.Users))
			return nil
		},
	})
	return cmd
}
