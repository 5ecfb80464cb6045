// Command controlplane starts a real Kubernetes control plane for bosun's tests: etcd
// (embedded), kube-apiserver and kube-controller-manager, on loopback ports, with its data in
// one folder. It is a test tool of the project; the product stays one Rust binary.
//
//	controlplane serve --data DIR [--token T] [--controllers a,b] [--stop-on-stdin-eof]
//
// writes DIR/kubeconfig (the admin token, the CA inline) once the API server is ready and
// the default ServiceAccount exists, prints one line `ready https://127.0.0.1:PORT
// http://127.0.0.1:PROXY` (the second a plain-HTTP proxy on loopback that adds the admin
// token, for the tests' own requests), and stops cleanly on SIGTERM or SIGINT (or when its
// standard input ends, with --stop-on-stdin-eof): the API server and the controller manager
// first, etcd last. SIGHUP restarts the API server with etcd compacted in between (watches
// resuming from before answer 410 Gone); it prints `restarted` once ready again.
//
// kube-apiserver and kube-controller-manager each run in a child process of this same binary
// (`controlplane kube-apiserver …`, `controlplane kube-controller-manager …`): the two keep
// process-wide registries (feature gates, signal handlers) that cannot be shared in one
// process. A child ends with its parent (the parent-death signal).
package main

import (
	"fmt"
	"os"

	"k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		if err := serve(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
			os.Exit(1)
		}
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(os.Args[2:])
		if err := cmd.Execute(); err != nil {
			os.Exit(1)
		}
	case "kube-controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(os.Args[2:])
		if err := cmd.Execute(); err != nil {
			os.Exit(1)
		}
	case "version":
		fmt.Println(version.Get().GitVersion)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
}

const usage = `usage: controlplane serve --data DIR [--token T] [--controllers LIST] [--stop-on-stdin-eof]
       controlplane version`
