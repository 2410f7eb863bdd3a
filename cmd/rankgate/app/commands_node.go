//go:build rankgate_node

package app

import "github.com/spf13/cobra"

// The build flavour, as `rankgate version` names it.
const (
	buildFlavour     = "node"
	buildFlavourText = "node (-tags rankgate_node: the commands that run on a GPU node, without client-go)"
)

// commands are the node build's (-tags rankgate_node): the faces that run
// on a GPU node, without client-go.
func (a *App) commands() []*cobra.Command {
	return []*cobra.Command{
		a.newPreflightCommand(),
		a.newInspectCommand(),
		a.newDemoCommand(),
		a.newLaunchCommand(),
		a.newInitCommand(),
		a.newCopyBinaryCommand(),
		a.newVersionCommand(),
	}
}
