// The checks of deploy/kubernetes (`make deploy-check`, part of `make test`):
// for each kustomization that can be applied (base, overlays/*), the objects
// it assembles validate against the Kubernetes API's schemas
// (kubernetes-models), and hold together as a reader needs them to: Services
// reach ports the containers declare and corral listens on, probes ask
// /healthz and /readyz, every Secret and ConfigMap key referred to exists,
// the headless Service of fleet.discovery selects the node pods, each role
// outlasts its drain and stop, and `corral serve --check` accepts the ConfigMap's
// corral.yaml with each role's arguments and environment.
//
//   CORRAL=build/corral node --test tests/deploy/

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import {
  CORRAL, KUBE, REPO, argValue, assemble, cmakeVersion, containerEnv, containerPort, environRefs,
  fileFromConfigMap, filesBelow, find, imageUid, kustomizations, mountOf, named, parseYaml, podLabels,
  refValue, rel, seconds, secretData, selects, validateObject, workloads, CLUSTER_KINDS,
} from './lib.mjs';

const NAME = 'app.kubernetes.io/name';
const COMPONENT = 'app.kubernetes.io/component';
const PART_OF = 'app.kubernetes.io/part-of';

// corral serve's listeners: the port name each has in the manifests, and the
// options that set it.
const LISTENERS = [
  { port: 'e2b', options: ['--listen', '--e2b-listen'] },
  { port: 'opensandbox', options: ['--opensandbox-listen'] },
  { port: 'gateway', options: ['--gateway-listen'] },
];
// Which workload kind runs each role, and which listeners it serves.
const ROLES = {
  node: { kind: 'DaemonSet', serves: ['e2b', 'opensandbox'] },
  front: { kind: 'Deployment', serves: ['e2b', 'opensandbox', 'gateway'] },
};
const DEFAULTS = {
  state_dir: '/run/corral',
  disk_dir: '/var/lib/corral/disks',
  gateway_data_dir: '/var/lib/corral/gateway',
  drain_grace: '30s',
  termination_grace: 30,
};

const podSpecs = (objects) => workloads(objects).filter((w) => w.spec?.template?.spec)
  .map((w) => ({ workload: w, spec: { ...w.spec.template.spec, containers: w.spec.template.spec.containers ?? [] } }));
const allContainers = (spec) => [...(spec.initContainers ?? []), ...(spec.containers ?? [])];

function listenAddress(value) {
  if (value === undefined) return { missing: true };
  if (value === 'off') return { off: true };
  const at = value.lastIndexOf(':');
  const host = value.slice(0, at).replace(/^\[|\]$/g, '');
  return { host, port: Number(value.slice(at + 1)) };
}

// corral's containers of a set: the containers of the workloads labelled
// app.kubernetes.io/name=corral, with their role, configuration (the file
// --config names, from its ConfigMap) and environment. Problems found on the
// way are in `problems`.
function corralPods(objects) {
  const pods = [];
  const problems = [];
  for (const { workload, spec } of podSpecs(objects)) {
    if (podLabels(workload)[NAME] !== 'corral') continue;
    for (const container of spec.containers) {
      const where = `${named(workload)}, container ${container.name}`;
      const args = container.args ?? [];
      const pod = { workload, spec, container, where, args, role: argValue(args, '--role') };
      pods.push(pod);
      pod.env = containerEnv(objects, container);
      const config = argValue(args, '--config');
      if (!config) {
        problems.push(`${where}: no --config`);
        continue;
      }
      const file = fileFromConfigMap(objects, spec, container, config);
      if (!file) {
        problems.push(`${where}: --config ${config} is no key of a ConfigMap mounted in the container`);
        continue;
      }
      pod.configText = file.text;
      pod.configFile = `${named(file.configMap)}, key ${file.key}`;
      try {
        pod.config = parseYaml(file.text, pod.configFile);
        if (typeof pod.config !== 'object' || Array.isArray(pod.config)) throw new Error(`${pod.configFile}: not a mapping`);
      } catch (e) {
        problems.push(e.message);
        delete pod.config;
      }
    }
  }
  return { pods, problems };
}

// The configuration's value of a key path (a.b.c), or undefined.
function configValue(config, dotted) {
  return dotted.split('.').reduce((v, k) => (v && typeof v === 'object' ? v[k] : undefined), config);
}

// A value of the configuration as the container sees it (os.environ/ resolved).
function resolved(pod, value) {
  const m = typeof value === 'string' && /^os\.environ\/(.*)$/.exec(value);
  return m ? pod.env[m[1]] : value;
}

// The most a role takes to stop once its drain is over, in seconds, as
// src/cli/serve.c stops (stop_servers): a gateway's calls get
// GATEWAY_DRAIN_MS to end, then each listener HTTP_DRAIN_MS for the answers
// under way; NaN when the constants cannot be read there.
function stopSeconds(args) {
  const text = fs.readFileSync(path.join(REPO, 'src/cli/serve.c'), 'utf8');
  const [gateway, http] = ['GATEWAY_DRAIN_MS', 'HTTP_DRAIN_MS']
    .map((name) => Number(new RegExp(`#define\\s+${name}\\s+(\\d+)`).exec(text)?.[1]) / 1000);
  const on = (l) => !listenAddress(argValue(args, ...l.options)).off;
  return LISTENERS.reduce((sum, l) => sum + (on(l) ? http + (l.port === 'gateway' ? gateway : 0) : 0), 0);
}

const securityOf = (pod) => ({ ...(pod.spec.securityContext ?? {}), ...(pod.container.securityContext ?? {}) });

function checkSet(dir) {
  let set;
  let failure;
  try {
    set = assemble(dir);
  } catch (e) {
    failure = e;
  }
  const objects = set ? set.objects.map((o) => o.obj) : [];
  const sourceOf = (obj) => rel(set.objects.find((o) => o.obj === obj).file);
  const { pods, problems: podProblems } = corralPods(objects);
  const role = (r) => pods.filter((p) => p.role === r);

  test('its resources and components assemble', () => {
    assert.equal(failure, undefined, failure?.message);
    assert.ok(objects.length > 0, 'no objects');
  });

  test('every object validates against the Kubernetes API schema of its kind (kubernetes-models), with no field the schema does not know', async () => {
    const problems = [];
    for (const obj of objects) {
      for (const p of await validateObject(obj)) problems.push(`${sourceOf(obj)}: ${named(obj)}: ${p}`);
    }
    assert.deepEqual(problems, []);
  });

  test('objects have unique names, live in the namespace the set makes, and carry app.kubernetes.io/name and part-of: corral', () => {
    const problems = [];
    const namespaces = objects.filter((o) => o.kind === 'Namespace').map((o) => o.metadata.name);
    if (namespaces.length !== 1) problems.push(`${namespaces.length} Namespaces (${namespaces.join(', ')}), not one`);
    const seen = new Set();
    for (const o of objects) {
      const id = `${o.kind}/${o.metadata?.namespace ?? ''}/${o.metadata?.name}`;
      if (seen.has(id)) problems.push(`${named(o)}: twice`);
      seen.add(id);
      if (!CLUSTER_KINDS.has(o.kind) && o.metadata?.namespace !== namespaces[0]) {
        problems.push(`${named(o)}: namespace ${o.metadata?.namespace}, not ${namespaces[0]}`);
      }
      const labels = o.metadata?.labels ?? {};
      if (!labels[NAME]) problems.push(`${named(o)}: no label ${NAME}`);
      if (labels[PART_OF] !== 'corral') problems.push(`${named(o)}: label ${PART_OF} is ${labels[PART_OF]}, not corral`);
    }
    assert.deepEqual(problems, []);
  });

  test('each workload selects its own pods, which carry app.kubernetes.io/name and component, and no other workload\'s', () => {
    const problems = [];
    const ws = workloads(objects);
    for (const w of ws) {
      const labels = podLabels(w);
      if (!labels[NAME] || !labels[COMPONENT]) problems.push(`${named(w)}: its pods lack ${NAME} or ${COMPONENT}`);
      if (!selects(w.spec.selector, labels)) problems.push(`${named(w)}: its selector does not select its own pods`);
      for (const other of ws) {
        if (other !== w && selects(w.spec.selector, podLabels(other))) problems.push(`${named(w)}: its selector selects the pods of ${named(other)}`);
      }
      if (w.metadata.labels?.[COMPONENT] !== labels[COMPONENT]) {
        problems.push(`${named(w)}: labelled component ${w.metadata.labels?.[COMPONENT]}, its pods ${labels[COMPONENT]}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  test('Services and PodDisruptionBudgets select the pods of one workload; every targetPort is a port its containers declare', () => {
    const problems = [];
    for (const o of objects.filter((x) => x.kind === 'Service' || x.kind === 'PodDisruptionBudget')) {
      const selector = o.spec?.selector;
      const chosen = workloads(objects).filter((w) => selects(selector, podLabels(w)));
      if (chosen.length !== 1) {
        problems.push(`${named(o)}: selects the pods of ${chosen.length} workloads (${chosen.map(named).join(', ')}), not one`);
        continue;
      }
      if (o.kind !== 'Service') continue;
      const w = chosen[0];
      for (const sp of o.spec.ports ?? []) {
        const target = sp.targetPort ?? sp.port;
        const found = w.spec.template.spec.containers.map((c) => containerPort(c, target)).find(Boolean);
        const [want, got] = [sp.protocol ?? 'TCP', found?.protocol ?? 'TCP'];
        if (!found) problems.push(`${named(o)}: port ${sp.name ?? sp.port} targets ${target}, which no container of ${named(w)} declares`);
        else if (want !== got) problems.push(`${named(o)}: port ${sp.name ?? sp.port} is ${want}, ${named(w)}'s ${target} ${got}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  test('corral runs as nodes (a DaemonSet) and fronts (a Deployment), from the image of this version', () => {
    const problems = [];
    const version = cmakeVersion();
    for (const [r, { kind }] of Object.entries(ROLES)) {
      const ps = role(r);
      if (!ps.length) problems.push(`no container runs corral serve --role ${r}`);
      for (const p of ps) {
        if (p.workload.kind !== kind) problems.push(`${p.where}: --role ${r} in a ${p.workload.kind}, not a ${kind}`);
        if (podLabels(p.workload)[COMPONENT] !== r) problems.push(`${p.where}: --role ${r}, component ${podLabels(p.workload)[COMPONENT]}`);
      }
    }
    for (const p of pods) {
      if (p.args[0] !== 'serve') problems.push(`${p.where}: args begin with ${p.args[0]}, not serve`);
      if (!ROLES[p.role]) problems.push(`${p.where}: --role ${p.role}, neither node nor front`);
      if (p.container.command) problems.push(`${p.where}: sets command; the image's entrypoint runs corral`);
      const image = p.container.image ?? '';
      const tag = image.includes('@') ? undefined : image.split('/').pop().split(':')[1];
      if (!/(^|\/)corral(:|@|$)/.test(image)) problems.push(`${p.where}: image ${image} is not corral's`);
      else if (tag !== undefined && tag !== version) {
        problems.push(`${p.where}: image ${image}: tag ${tag}, not the version of CMakeLists.txt (${version})`);
      }
    }
    assert.deepEqual(problems, []);
  });

  test('corral\'s containers declare a port for each of their role\'s listeners, and listen on every port they declare', () => {
    const problems = [];
    for (const p of pods) {
      const serves = ROLES[p.role]?.serves ?? [];
      const declared = new Set((p.container.ports ?? []).map((cp) => cp.name));
      for (const l of LISTENERS) {
        const addr = listenAddress(argValue(p.args, ...l.options));
        const option = l.options[0];
        const port = (p.container.ports ?? []).find((cp) => cp.name === l.port);
        declared.delete(l.port);
        if (addr.missing) {
          problems.push(`${p.where}: no ${option} (its default is a loopback address, out of the pod's reach)`);
        } else if (addr.off) {
          if (serves.includes(l.port)) problems.push(`${p.where}: ${option} off, but a ${p.role} serves it`);
          if (port) problems.push(`${p.where}: declares port ${l.port}, but ${option} is off`);
        } else {
          if (!serves.includes(l.port)) problems.push(`${p.where}: ${option} ${addr.host}:${addr.port}, but a ${p.role} does not serve it (off)`);
          if (/^(127\.|localhost$|::1$)/.test(addr.host)) problems.push(`${p.where}: ${option} on loopback ${addr.host}, out of the pod's reach`);
          if (!port) problems.push(`${p.where}: ${option} ${addr.port}, but no container port is named ${l.port}`);
          else if (port.containerPort !== addr.port) problems.push(`${p.where}: port ${l.port} is ${port.containerPort}, ${option} ${addr.port}`);
        }
      }
      for (const name of declared) problems.push(`${p.where}: declares port ${name}, which no listener serves`);
    }
    assert.deepEqual(problems, []);
  });

  test('liveness probes ask /healthz and readiness probes /readyz, on a port the container declares', () => {
    const problems = [];
    for (const { workload, spec } of podSpecs(objects)) {
      for (const c of spec.containers) {
        const where = `${named(workload)}, container ${c.name}`;
        const isCorral = podLabels(workload)[NAME] === 'corral';
        for (const [kind, paths] of [['livenessProbe', ['/healthz']], ['readinessProbe', ['/readyz']], ['startupProbe', ['/healthz', '/readyz']]]) {
          const probe = c[kind];
          if (!probe) {
            if (kind !== 'startupProbe') problems.push(`${where}: no ${kind}`);
            continue;
          }
          const port = probe.httpGet?.port ?? probe.tcpSocket?.port ?? probe.grpc?.port;
          if (port !== undefined && !containerPort(c, port)) {
            problems.push(`${where}: ${kind} asks port ${port}, which the container does not declare`);
          }
          if (!isCorral) continue;
          if (!probe.httpGet) problems.push(`${where}: ${kind} is not an HTTP GET`);
          else if (!paths.includes(probe.httpGet.path)) problems.push(`${where}: ${kind} asks ${probe.httpGet.path}, not ${paths.join(' or ')}`);
          else if ((probe.httpGet.scheme ?? 'HTTP') !== 'HTTP') {
            problems.push(`${where}: ${kind} over ${probe.httpGet.scheme}; corral's listeners speak HTTP`);
          }
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  test('every secretKeyRef, configMapKeyRef and volume names a Secret or ConfigMap of the set, and a key it holds', () => {
    const problems = [];
    const check = (where, kind, name, key, optional) => {
      if (optional) return;
      const o = find(objects, kind, name);
      if (!o) problems.push(`${where}: ${kind} ${name} is not in the set`);
      else if (key !== undefined && refValue(objects, kind, name, key) === undefined) problems.push(`${where}: ${kind} ${name} has no key ${key}`);
    };
    for (const { workload, spec } of podSpecs(objects)) {
      for (const c of allContainers(spec)) {
        const where = `${named(workload)}, container ${c.name}`;
        for (const e of c.env ?? []) {
          const s = e.valueFrom?.secretKeyRef;
          const m = e.valueFrom?.configMapKeyRef;
          if (s) check(`${where}, env ${e.name}`, 'Secret', s.name, s.key, s.optional);
          if (m) check(`${where}, env ${e.name}`, 'ConfigMap', m.name, m.key, m.optional);
        }
        for (const f of c.envFrom ?? []) {
          if (f.secretRef) check(`${where}, envFrom`, 'Secret', f.secretRef.name, undefined, f.secretRef.optional);
          if (f.configMapRef) check(`${where}, envFrom`, 'ConfigMap', f.configMapRef.name, undefined, f.configMapRef.optional);
        }
      }
      for (const v of spec.volumes ?? []) {
        const where = `${named(workload)}, volume ${v.name}`;
        const sources = [
          v.secret && { kind: 'Secret', name: v.secret.secretName, ...v.secret },
          v.configMap && { kind: 'ConfigMap', ...v.configMap },
          ...(v.projected?.sources ?? []).flatMap((s) => [
            s.secret && { kind: 'Secret', ...s.secret },
            s.configMap && { kind: 'ConfigMap', ...s.configMap },
          ]),
        ].filter(Boolean);
        for (const s of sources) {
          check(where, s.kind, s.name, undefined, s.optional);
          for (const item of s.items ?? []) check(where, s.kind, s.name, item.key, s.optional);
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  test('every volumeMount names a volume of its pod, mounted once', () => {
    const problems = [];
    for (const { workload, spec } of podSpecs(objects)) {
      const volumes = new Set((spec.volumes ?? []).map((v) => v.name));
      for (const t of workload.spec.volumeClaimTemplates ?? []) volumes.add(t.metadata.name);
      for (const c of allContainers(spec)) {
        const paths = new Set();
        for (const m of c.volumeMounts ?? []) {
          if (!volumes.has(m.name)) problems.push(`${named(workload)}, container ${c.name}: mounts ${m.name}, which is no volume of the pod`);
          if (paths.has(m.mountPath)) problems.push(`${named(workload)}, container ${c.name}: two mounts at ${m.mountPath}`);
          paths.add(m.mountPath);
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  test('the example Secrets hold placeholders only, marked CHANGE-ME', () => {
    const problems = [];
    for (const s of objects.filter((o) => o.kind === 'Secret')) {
      for (const [k, v] of Object.entries(secretData(s))) {
        if (!String(v).includes('CHANGE-ME')) problems.push(`${named(s)}: ${k} is not a CHANGE-ME placeholder`);
      }
    }
    assert.deepEqual(problems, []);
  });

  test('--config names a corral.yaml from a ConfigMap, and every os.environ/ variable it names is set in the pod', () => {
    const problems = [...podProblems];
    for (const p of pods.filter((x) => x.config)) {
      for (const { where, name } of environRefs(p.config)) {
        if (p.env[name] === undefined) {
          problems.push(`${p.where}: ${p.configFile} names os.environ/${name} at ${where}, which the container's env does not set`);
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  test('the headless Service of fleet.discovery selects the node pods, only when ready, at their E2B port', () => {
    const problems = [];
    const nodes = role('node');
    for (const p of role('front').filter((x) => x.config)) {
      const discovery = configValue(p.config, 'fleet.discovery');
      if (typeof discovery !== 'string') {
        problems.push(`${p.where}: ${p.configFile} has no fleet.discovery (these manifests find nodes through a headless Service)`);
        continue;
      }
      const at = discovery.lastIndexOf(':');
      const [svcName, namespace] = discovery.slice(0, at).split('.');
      const port = Number(discovery.slice(at + 1));
      const svc = find(objects, 'Service', svcName);
      if (!svc) {
        problems.push(`fleet.discovery ${discovery}: no Service ${svcName}`);
        continue;
      }
      if (namespace && namespace !== svc.metadata.namespace) {
        problems.push(`fleet.discovery ${discovery}: ${named(svc)} is in namespace ${svc.metadata.namespace}`);
      }
      if (svc.spec.clusterIP !== 'None') {
        problems.push(`${named(svc)}: not headless (clusterIP ${svc.spec.clusterIP}, not None): its name would have one record`);
      }
      if (svc.spec.publishNotReadyAddresses) {
        problems.push(`${named(svc)}: publishNotReadyAddresses: a node that drains would keep its record`);
      }
      for (const w of workloads(objects)) {
        const isNode = nodes.some((n) => n.workload === w);
        const chosen = selects(svc.spec.selector, podLabels(w));
        if (isNode && !chosen) problems.push(`${named(svc)}: does not select the pods of ${named(w)}`);
        if (!isNode && chosen) problems.push(`${named(svc)}: selects the pods of ${named(w)}, which are not nodes`);
      }
      const sp = (svc.spec.ports ?? []).find((x) => x.port === port);
      if (!sp) {
        problems.push(`fleet.discovery ${discovery}: ${named(svc)} has no port ${port}`);
        continue;
      }
      for (const n of nodes) {
        const target = containerPort(n.container, sp.targetPort ?? sp.port);
        if (target?.name !== 'e2b') {
          problems.push(`fleet.discovery ${discovery}: port ${port} of ${named(svc)} reaches ${n.where}'s ` +
            `${target?.name ?? 'nothing'}, not its E2B listener`);
        }
      }
    }
    assert.deepEqual(problems, []);
  });

  test('each role outlasts its drain and its stop: terminationGracePeriodSeconds is longer than fleet.drain_grace and what stopping takes after it', () => {
    const problems = [];
    for (const p of pods.filter((x) => x.config)) {
      const grace = configValue(p.config, 'fleet.drain_grace') ?? DEFAULTS.drain_grace;
      const drain = seconds(grace);
      const stop = stopSeconds(p.args);
      const termination = p.spec.terminationGracePeriodSeconds ?? DEFAULTS.termination_grace;
      if (Number.isNaN(drain)) problems.push(`${p.configFile}: fleet.drain_grace ${grace} is not a duration`);
      else if (Number.isNaN(stop)) problems.push('src/cli/serve.c: no GATEWAY_DRAIN_MS and HTTP_DRAIN_MS to read');
      else if (!(termination > drain + stop)) {
        problems.push(`${named(p.workload)}: terminationGracePeriodSeconds ${termination} is not longer than ` +
          `fleet.drain_grace ${grace} and the ${stop} s stopping takes after it: the kubelet would kill a ` +
          `${p.role} still draining`);
      }
    }
    assert.deepEqual(problems, []);
  });

  test('a node is privileged, has the host\'s cgroup hierarchy and /dev, and keeps state_dir and disk_dir on the host', () => {
    const problems = [];
    const hostMount = (p, dir, hostPath) => {
      const found = mountOf(p.spec, p.container, dir);
      if (!found || found.mount.mountPath.replace(/\/+$/, '') !== dir) problems.push(`${p.where}: nothing is mounted at ${dir}`);
      else if (!found.volume?.hostPath) problems.push(`${p.where}: ${dir} is not a directory of the host (hostPath)`);
      else if (hostPath && found.volume.hostPath.path !== hostPath) {
        problems.push(`${p.where}: ${dir} is the host's ${found.volume.hostPath.path}, not ${hostPath}`);
      }
      else if (found.mount.readOnly) problems.push(`${p.where}: ${dir} is read-only`);
    };
    for (const p of role('node').filter((x) => x.config)) {
      if (securityOf(p).privileged !== true) problems.push(`${p.where}: not privileged`);
      hostMount(p, '/sys/fs/cgroup', '/sys/fs/cgroup');
      hostMount(p, argValue(p.args, '--state-dir') ?? p.config.state_dir ?? DEFAULTS.state_dir);
      const disks = argValue(p.args, '--disk-dir') ?? p.config.disk_dir ?? DEFAULTS.disk_dir;
      if (disks !== 'memory') {
        hostMount(p, disks);
        hostMount(p, '/dev', '/dev');
      }
    }
    assert.deepEqual(problems, []);
  });

  test('fronts run as the image\'s unprivileged user on a read-only root, with a writable volume for the gateway\'s data_dir', () => {
    const problems = [];
    const uid = imageUid();
    for (const p of role('front').filter((x) => x.config)) {
      const sc = securityOf(p);
      if (sc.runAsNonRoot !== true) problems.push(`${p.where}: runAsNonRoot is not true`);
      if (sc.runAsUser !== uid) problems.push(`${p.where}: runAsUser ${sc.runAsUser}, not the image's user ${uid} (deploy/container/Containerfile)`);
      if (sc.privileged) problems.push(`${p.where}: privileged`);
      if (sc.allowPrivilegeEscalation !== false) problems.push(`${p.where}: allowPrivilegeEscalation is not false`);
      if (!(sc.capabilities?.drop ?? []).includes('ALL')) problems.push(`${p.where}: capabilities not dropped (drop: [ALL])`);
      if (sc.readOnlyRootFilesystem !== true) problems.push(`${p.where}: the root filesystem is writable`);
      const data = argValue(p.args, '--gateway-data-dir') ?? configValue(p.config, 'gateway.data_dir') ?? DEFAULTS.gateway_data_dir;
      const found = mountOf(p.spec, p.container, data);
      if (!found) problems.push(`${p.where}: no volume holds the gateway's data_dir ${data} (the root is read-only)`);
      else if (found.mount.readOnly || found.volume?.configMap || found.volume?.secret) {
        problems.push(`${p.where}: the gateway's data_dir ${data} is read-only`);
      }
    }
    assert.deepEqual(problems, []);
  });

  // Only where the set runs the store itself (the overlay with PostgreSQL):
  // elsewhere the URL names a database outside it, which no manifest says.
  const storeInSet = role('front').some((p) => {
    const store = p.config && resolved(p, configValue(p.config, 'gateway.store'));
    return typeof store === 'string' && /^postgres(ql)?:\/\//.test(store) &&
      find(objects, 'Service', new URL(store).hostname.split('.')[0]);
  });
  if (storeInSet) test('a store URL naming a PostgreSQL of the set carries its user, password, database and port', () => {
    const problems = [];
    let checked = 0;
    for (const p of role('front').filter((x) => x.config)) {
      const store = resolved(p, configValue(p.config, 'gateway.store'));
      if (typeof store !== 'string' || !/^postgres(ql)?:\/\//.test(store)) continue;
      const url = new URL(store);
      const svc = find(objects, 'Service', url.hostname.split('.')[0]);
      if (!svc) continue;
      checked++;
      const db = workloads(objects).find((w) => selects(svc.spec.selector, podLabels(w)));
      const sp = (svc.spec.ports ?? []).find((x) => x.port === Number(url.port || 5432));
      if (!db || !sp) {
        problems.push(`${p.where}: the store ${url.host}: ${named(svc)} selects no workload or has no port ${url.port || 5432}`);
        continue;
      }
      const c = db.spec.template.spec.containers.find((x) => containerPort(x, sp.targetPort ?? sp.port));
      if (!c) {
        problems.push(`${p.where}: the store ${url.host}: no container of ${named(db)} has port ${sp.targetPort ?? sp.port}`);
        continue;
      }
      const env = containerEnv(objects, c);
      const user = env.POSTGRES_USER ?? 'postgres';
      const want = { user, password: env.POSTGRES_PASSWORD, database: env.POSTGRES_DB ?? user };
      const have = { user: decodeURIComponent(url.username), password: decodeURIComponent(url.password), database: url.pathname.slice(1) };
      for (const k of Object.keys(want)) if (want[k] !== have[k]) problems.push(`${p.where}: the store URL's ${k} is not ${named(db)}'s`);
    }
    assert.ok(checked, 'no front names the PostgreSQL of the set');
    assert.deepEqual(problems, []);
  });

  test('corral serve --check accepts each role\'s corral.yaml, arguments and environment', () => {
    assert.ok(fs.existsSync(CORRAL), `${CORRAL} is missing: make build (or set CORRAL)`);
    const problems = [...podProblems];
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'corral-deploy-'));
    try {
      for (const p of pods.filter((x) => x.configText !== undefined)) {
        const file = path.join(tmp, `${p.role}.yaml`);
        fs.writeFileSync(file, p.configText);
        const args = [...p.args];
        args.splice(1, 0, '--check');
        const at = args.findIndex((a) => a === '--config' || a.startsWith('--config='));
        args.splice(at, args[at] === '--config' ? 2 : 1, `--config=${file}`);
        const env = { PATH: process.env.PATH, ...p.env };
        for (const k of ['ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS']) if (process.env[k]) env[k] = process.env[k];
        const r = spawnSync(CORRAL, args, { env, encoding: 'utf8', timeout: 20000 });
        if (r.status !== 0) {
          const said = (r.stderr || r.stdout || r.error?.message || '').trim().split('\n').filter(Boolean).slice(0, 3).join(' / ');
          problems.push(`${p.where}: corral ${args.join(' ')} exited with ${r.status ?? r.signal}: ${said}`);
        }
      }
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
    assert.deepEqual(problems, []);
  });
}

const all = kustomizations();
for (const k of all.filter((x) => x.kind === 'Kustomization')) {
  describe(rel(k.dir), () => checkSet(k.dir));
}

test('every YAML file of deploy/kubernetes belongs to a kustomization that can be applied, and every Component is used', () => {
  const problems = [];
  const reached = new Set();
  for (const k of all.filter((x) => x.kind === 'Kustomization')) {
    try {
      for (const f of assemble(k.dir).files) reached.add(f);
    } catch {
      // reported by that kustomization's own tests
    }
  }
  for (const f of filesBelow(KUBE)) {
    if (/\.ya?ml$/.test(f) && !reached.has(f)) problems.push(`${rel(f)}: in no kustomization`);
  }
  assert.deepEqual(problems, []);
});
