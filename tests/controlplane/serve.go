package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
)

// The controllers kube-controller-manager runs unless --controllers says otherwise: what
// bosun's users rely on the cluster for (owner-reference garbage collection, namespace
// termination, ServiceAccounts and their tokens, the root CA ConfigMap). Workload
// controllers stay off, as no kubelet runs pods here.
const defaultControllers = "garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller"

type options struct {
	data        string
	token       string
	controllers string
	stdinEOF    bool
	startWithin time.Duration
}

func serve(args []string) error {
	var o options
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.data, "data", "", "folder for etcd's data, certificates, logs and the kubeconfig (required)")
	fs.StringVar(&o.token, "token", "", "the admin bearer token (made at random when empty)")
	fs.StringVar(&o.controllers, "controllers", defaultControllers, "kube-controller-manager's --controllers")
	fs.BoolVar(&o.stdinEOF, "stop-on-stdin-eof", false, "stop when standard input ends (the starter died)")
	fs.DurationVar(&o.startWithin, "start-within", 3*time.Minute, "give up when not ready within this time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.data == "" {
		return errors.New("--data DIR is required")
	}
	data, err := filepath.Abs(o.data)
	if err != nil {
		return fmt.Errorf("--data %q: %w", o.data, err)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fmt.Errorf("--data %q: %w", data, err)
	}
	if o.token == "" {
		o.token = randomToken()
	}
	pki, err := writePKI(data)
	if err != nil {
		return fmt.Errorf("certificates in %s: %w", data, err)
	}
	if err := os.WriteFile(filepath.Join(data, "tokens.csv"), []byte(o.token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if o.stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}

	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	// The proxy's listener is kept open from here on, so its port cannot be taken.
	proxyListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer proxyListener.Close()

	etcd, err := startEtcd(filepath.Join(data, "etcd"), etcdClient, etcdPeer)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	apiArgs := []string{
		"--etcd-servers=http://127.0.0.1:" + fmt.Sprint(etcdClient),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// A loopback address cannot be the kubernetes Service's endpoint.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + fmt.Sprint(apiPort),
		"--cert-dir=" + filepath.Join(data, "apiserver-certs"),
		"--tls-cert-file=" + pki.serverCert,
		"--tls-private-key-file=" + pki.serverKey,
		"--client-ca-file=" + pki.caCert,
		"--token-auth-file=" + filepath.Join(data, "tokens.csv"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saPublic,
		"--service-account-signing-key-file=" + pki.saPrivate,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--profiling=false",
		"--enable-priority-and-fairness=false",
	}
	apiLog := filepath.Join(data, "kube-apiserver.log")
	api, err := startChild(ctx, self, "kube-apiserver", apiLog, apiArgs...)
	if err != nil {
		return err
	}
	children := []*child{api}
	defer func() { stopChildren(children) }()

	kubeconfig := filepath.Join(data, "kubeconfig")
	adminConfig := filepath.Join(data, "admin.kubeconfig")
	if err := writeKubeconfig(adminConfig, server, pki.caPEM, o.token); err != nil {
		return err
	}
	deadline := time.Now().Add(o.startWithin)
	client, err := httpsClient(pki.caPEM)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, deadline, children, "kube-apiserver /readyz", func() bool {
		return get(client, server+"/readyz", o.token) == http.StatusOK
	}); err != nil {
		return err
	}

	kcm, err := startChild(ctx, self, "kube-controller-manager", filepath.Join(data, "kube-controller-manager.log"),
		"--kubeconfig="+adminConfig,
		"--authentication-kubeconfig="+adminConfig,
		"--authorization-kubeconfig="+adminConfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+fmt.Sprint(kcmPort),
		"--cert-dir="+filepath.Join(data, "kcm-certs"),
		"--leader-elect=false",
		"--controllers="+o.controllers,
		"--service-account-private-key-file="+pki.saPrivate,
		"--root-ca-file="+pki.caCert,
		"--use-service-account-credentials=false",
		"--profiling=false",
	)
	if err != nil {
		return err
	}
	children = append(children, kcm)
	if strings.Contains(o.controllers, "serviceaccount-controller") || o.controllers == "*" {
		if err := waitFor(ctx, deadline, children, "the default ServiceAccount", func() bool {
			return get(client, server+"/api/v1/namespaces/default/serviceaccounts/default", o.token) == http.StatusOK
		}); err != nil {
			return err
		}
	}
	// The kubeconfig appears whole, and only once the control plane is ready.
	if err := copyFile(adminConfig, kubeconfig); err != nil {
		return err
	}
	proxy, err := adminProxy(server, pki.caPEM, o.token)
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(proxyListener, proxy) }()
	fmt.Printf("ready %s http://%s\n", server, proxyListener.Addr())

	// SIGHUP restarts the API server on its port, its watch history gone: etcd is
	// compacted to its newest revision between the two, so a watch that resumes from an
	// older resourceVersion is answered 410 Gone, as after a long partition.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-exited(children):
			return fmt.Errorf("%s exited: %v (log: %s)", c.name, c.err, c.log)
		case <-hup:
			stopChildren([]*child{children[0]})
			if err := compact(etcd); err != nil {
				return fmt.Errorf("compacting etcd: %w", err)
			}
			api, err := startChild(ctx, self, "kube-apiserver", apiLog, apiArgs...)
			if err != nil {
				return err
			}
			children[0] = api
			if err := waitFor(ctx, time.Now().Add(o.startWithin), children, "the restarted kube-apiserver", func() bool {
				return get(client, server+"/readyz", o.token) == http.StatusOK
			}); err != nil {
				return err
			}
			fmt.Println("restarted")
		}
	}
}

// compact drops etcd's history before its newest revision.
func compact(e *embed.Etcd) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := e.Server.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: e.Server.KV().Rev(), Physical: true})
	return err
}

type child struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startChild(ctx context.Context, self, name, log string, args ...string) (*child, error) {
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{name}, args...)...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &child{name: name, log: log, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		out.Close()
		close(c.done)
	}()
	return c, nil
}

// exited is closed with the first child that ends on its own.
func exited(children []*child) <-chan *child {
	first := make(chan *child, len(children))
	for _, c := range children {
		go func(c *child) {
			<-c.done
			first <- c
		}(c)
	}
	return first
}

// stopChildren ends the children newest first: SIGTERM, then SIGKILL after 15 seconds.
func stopChildren(children []*child) {
	for i := len(children) - 1; i >= 0; i-- {
		c := children[i]
		select {
		case <-c.done:
			continue
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}

func waitFor(ctx context.Context, deadline time.Time, children []*child, what string, ok func() bool) error {
	for {
		if ok() {
			return nil
		}
		for _, c := range children {
			select {
			case <-c.done:
				return fmt.Errorf("%s exited before %s was ready: %v\n%s", c.name, what, c.err, tail(c.log, 30))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready in time", what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped while waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var all []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		all = append(all, s.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func startEtcd(dir string, clientPort, peerPort int) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "controlplane"
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(filepath.Dir(dir), "etcd.log")}
	// Tests write much and keep little: no fsync per write would lie about a crash, but the
	// control plane's data is thrown away with the test.
	cfg.UnsafeNoFsync = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("etcd not ready within 60s")
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func httpsClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the CA certificate does not parse")
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}, nil
}

func get(client *http.Client, url, token string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// adminProxy forwards plain HTTP on loopback to the API server with the admin token, as
// `kubectl proxy` does: the tests' own requests need no TLS client. Watches stream through
// (every write is flushed at once).
func adminProxy(server string, caPEM []byte, token string) (http.Handler, error) {
	target, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	client, err := httpsClient(caPEM)
	if err != nil {
		return nil, err
	}
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		Transport:     client.Transport,
		FlushInterval: -1,
	}, nil
}

func writeKubeconfig(path, server string, caPEM []byte, token string) error {
	// Written as kubectl writes one: tools and tests that read a kubeconfig's lines find
	// `server:` where they expect it. Every value is a URL, base64 or hex: nothing to quote.
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: controlplane
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: controlplane
  context:
    cluster: controlplane
    user: admin
    namespace: default
current-context: controlplane
`, server, base64.StdEncoding.EncodeToString(caPEM), token)
	return os.WriteFile(path, []byte(text), 0o600)
}

func copyFile(from, to string) error {
	text, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, text, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}
