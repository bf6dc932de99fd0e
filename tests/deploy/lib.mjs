// What the checks of deploy/ share: reading the Kubernetes manifests the way
// Kustomize assembles them (kustomization.yaml's resources and components,
// followed by hand: only those two keys are understood, and anything else is
// refused, so that what is checked is what `kubectl apply -k` applies),
// validating an object with its class of kubernetes-models, the questions
// asked of pod specs (labels, ports, env, volumes, arguments), and reading
// the Containerfile and scripts/install-deps.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const KUBE = path.join(REPO, 'deploy/kubernetes');
export const CONTAINERFILE = path.join(REPO, 'deploy/container/Containerfile');

// The corral binary whose `serve --check` reads the configuration, and whose
// folder holds the programs the image ships (the release build of `make build`).
export const CORRAL = process.env.CORRAL || path.join(REPO, 'build/corral');

export const rel = (p) => path.relative(REPO, p);

// ---------------------------------------------------------------- YAML files

// Every document of a YAML file, as plain objects (empty documents skipped);
// a syntax error or a duplicate key throws, naming the file.
export function readYamlDocs(file) {
  const text = fs.readFileSync(file, 'utf8');
  const docs = YAML.parseAllDocuments(text, { uniqueKeys: true });
  const out = [];
  for (const doc of docs) {
    if (doc.errors.length) throw new Error(`${rel(file)}: ${doc.errors[0].message}`);
    const value = doc.toJS({ maxAliasCount: 0 });
    if (value !== null && value !== undefined) out.push(value);
  }
  return out;
}

export function parseYaml(text, what) {
  const doc = YAML.parseDocument(text, { uniqueKeys: true });
  if (doc.errors.length) throw new Error(`${what}: ${doc.errors[0].message}`);
  return doc.toJS({ maxAliasCount: 0 }) ?? {};
}

// Every file below dir (recursively), node_modules excluded.
export function filesBelow(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules') out.push(...filesBelow(p));
    } else {
      out.push(p);
    }
  }
  return out.sort();
}

// ------------------------------------------------------------- kustomizations

const KUSTOMIZE_KINDS = {
  Kustomization: 'kustomize.config.k8s.io/v1beta1',
  Component: 'kustomize.config.k8s.io/v1alpha1',
};
const KUSTOMIZE_KEYS = new Set(['apiVersion', 'kind', 'resources', 'components']);

function readKustomization(dir) {
  const file = path.join(dir, 'kustomization.yaml');
  if (!fs.existsSync(file)) throw new Error(`${rel(dir)}: no kustomization.yaml`);
  const docs = readYamlDocs(file);
  if (docs.length !== 1) throw new Error(`${rel(file)}: ${docs.length} documents, not one`);
  const k = docs[0];
  if (KUSTOMIZE_KINDS[k.kind] === undefined || KUSTOMIZE_KINDS[k.kind] !== k.apiVersion) {
    throw new Error(`${rel(file)}: kind ${k.kind} of ${k.apiVersion} is neither a ` +
      `Kustomization (${KUSTOMIZE_KINDS.Kustomization}) nor a Component (${KUSTOMIZE_KINDS.Component})`);
  }
  for (const key of Object.keys(k)) {
    if (!KUSTOMIZE_KEYS.has(key)) {
      throw new Error(`${rel(file)}: '${key}' is a transformation these checks do not apply; ` +
        `keep to resources and components, or teach tests/deploy/lib.mjs what it does`);
    }
  }
  for (const key of ['resources', 'components']) {
    if (k[key] !== undefined && !(Array.isArray(k[key]) && k[key].every((r) => typeof r === 'string'))) {
      throw new Error(`${rel(file)}: ${key} must be a list of paths`);
    }
  }
  return { file, kind: k.kind, resources: k.resources ?? [], components: k.components ?? [] };
}

function localPath(dir, entry, file) {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(entry) || entry.startsWith('github.com/')) {
    throw new Error(`${rel(file)}: ${entry} is remote; deploy/ keeps to its own files`);
  }
  const p = path.resolve(dir, entry);
  if (!fs.existsSync(p)) throw new Error(`${rel(file)}: ${entry} does not exist`);
  if (!p.startsWith(KUBE + path.sep)) throw new Error(`${rel(file)}: ${entry} is outside deploy/kubernetes`);
  return p;
}

// The objects a kustomization directory produces, in order, each with the
// file it comes from, and every file read on the way (kustomization.yaml
// files included). A resource is a file of objects or a directory holding a
// Kustomization; a component a directory holding a Component.
export function assemble(dir, stack = []) {
  if (stack.includes(dir)) throw new Error(`${rel(dir)}: includes itself (${stack.map(rel).join(' -> ')})`);
  const k = readKustomization(dir);
  const objects = [];
  const files = new Set([k.file]);
  const add = (sub) => {
    objects.push(...sub.objects);
    for (const f of sub.files) files.add(f);
  };
  for (const entry of k.resources) {
    const p = localPath(dir, entry, k.file);
    if (fs.statSync(p).isDirectory()) {
      const sub = assemble(p, [...stack, dir]);
      if (sub.kind !== 'Kustomization') throw new Error(`${rel(k.file)}: ${entry} is a ${sub.kind}, list it under components`);
      add(sub);
    } else {
      files.add(p);
      for (const obj of readYamlDocs(p)) objects.push({ obj, file: p });
    }
  }
  for (const entry of k.components) {
    const p = localPath(dir, entry, k.file);
    if (!fs.statSync(p).isDirectory()) throw new Error(`${rel(k.file)}: component ${entry} is not a directory`);
    const sub = assemble(p, [...stack, dir]);
    if (sub.kind !== 'Component') throw new Error(`${rel(k.file)}: ${entry} is a ${sub.kind}, not a Component`);
    add(sub);
  }
  return { dir, kind: k.kind, objects, files };
}

// Every directory of deploy/kubernetes holding a kustomization.yaml, with
// its kind (one that cannot be read counts as a Kustomization, whose own
// checks then say what is wrong with it).
export function kustomizations() {
  return filesBelow(KUBE)
    .filter((f) => path.basename(f) === 'kustomization.yaml')
    .map((f) => {
      let kind;
      try {
        kind = readYamlDocs(f)[0]?.kind;
      } catch {
        // reported when it is assembled
      }
      return { dir: path.dirname(f), kind: kind === 'Component' ? 'Component' : 'Kustomization' };
    });
}

// ---------------------------------------------------------- kubernetes-models

// The class of kubernetes-models for an apiVersion and kind, or null.
export async function modelClass(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[a-z0-9.]*\/?v[0-9a-z]+$/.test(apiVersion)) {
    return null;
  }
  let mod;
  try {
    mod = await import(`kubernetes-models/${apiVersion}`);
  } catch {
    return null;
  }
  const cls = mod[kind];
  return cls && cls.apiVersion === apiVersion && cls.kind === kind ? cls : null;
}

// A deep copy of value whose objects record which of their keys are read;
// `seen` collects {path, keys, read} for each object.
function watched(value, where, seen) {
  if (value === null || typeof value !== 'object') return value;
  const read = new Set();
  const copy = Array.isArray(value)
    ? value.map((v, i) => watched(v, `${where}/${i}`, seen))
    : Object.fromEntries(Object.entries(value).map(([k, v]) => [k, watched(v, `${where}/${k}`, seen)]));
  if (!Array.isArray(value)) seen.push({ where, keys: Object.keys(value), read });
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === 'string') read.add(key);
      return Reflect.get(target, key, receiver);
    },
    ownKeys(target) {
      for (const key of Reflect.ownKeys(target)) if (typeof key === 'string') read.add(key);
      return Reflect.ownKeys(target);
    },
  });
}

// Validates obj against the API's schema with its kubernetes-models class.
// The schemas let unknown fields through (the API server would drop them,
// e.g. a misspelt "livenesProbe"); the validator reads every field its
// schema knows, so a field it never read is one the schema does not know.
// Returns a list of problems.
export async function validateObject(obj) {
  const cls = await modelClass(obj?.apiVersion, obj?.kind);
  if (!cls) return [`${obj?.apiVersion} ${obj?.kind}: not a kind kubernetes-models knows`];
  try {
    new cls(obj).validate();
  } catch (e) {
    return [e.message];
  }
  const seen = [];
  cls.prototype.validate.call(watched(new cls(obj).toJSON(), '', seen));
  const unknown = [];
  for (const { where, keys, read } of seen) {
    for (const key of keys) if (!read.has(key)) unknown.push(`${where}/${key}: a field the schema does not know`);
  }
  return unknown;
}

// ---------------------------------------------------------------- pod specs

export const WORKLOAD_KINDS = new Set(['Deployment', 'DaemonSet', 'StatefulSet']);
export const CLUSTER_KINDS = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'PriorityClass',
  'StorageClass', 'PersistentVolume', 'RuntimeClass']);

export const named = (obj) => `${obj.kind} ${obj.metadata?.name}`;

export const workloads = (objects) => objects.filter((o) => WORKLOAD_KINDS.has(o.kind));
export const podLabels = (w) => w.spec?.template?.metadata?.labels ?? {};

// Whether a selector (a Service's map, or a LabelSelector) selects labels.
export function selects(selector, labels) {
  if (!selector) return false;
  const isLabelSelector = selector.matchLabels !== undefined || selector.matchExpressions !== undefined;
  const match = isLabelSelector ? selector.matchLabels ?? {} : selector;
  if (!Object.keys(match).length && !(selector.matchExpressions ?? []).length) return false;
  for (const [k, v] of Object.entries(match)) if (labels[k] !== v) return false;
  for (const e of isLabelSelector ? selector.matchExpressions ?? [] : []) {
    const has = Object.hasOwn(labels, e.key);
    if (e.operator === 'In' && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === 'NotIn' && has && e.values.includes(labels[e.key])) return false;
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
  }
  return true;
}

// The containerPort of a container that a port reference (a name or a
// number, as in a Service's targetPort or a probe's port) designates.
export function containerPort(container, ref) {
  return (container.ports ?? []).find((p) => (typeof ref === 'string' ? p.name === ref : p.containerPort === ref));
}

// The value of an option in a container's args (`--opt VALUE` or
// `--opt=VALUE`); undefined when absent.
export function argValue(args, ...names) {
  for (let i = 0; i < args.length; i++) {
    for (const name of names) {
      if (args[i] === name) return args[i + 1];
      if (args[i].startsWith(`${name}=`)) return args[i].slice(name.length + 1);
    }
  }
  return undefined;
}

export function secretData(secret) {
  const out = {};
  for (const [k, v] of Object.entries(secret.data ?? {})) out[k] = Buffer.from(v, 'base64').toString('utf8');
  return Object.assign(out, secret.stringData ?? {});
}

export const find = (objects, kind, name) => objects.find((o) => o.kind === kind && o.metadata?.name === name);

// The value of a key of a ConfigMap or Secret of the set; undefined when the
// object or the key is missing.
export function refValue(objects, kind, name, key) {
  const o = find(objects, kind, name);
  if (!o) return undefined;
  const data = kind === 'Secret' ? secretData(o) : { ...(o.data ?? {}) };
  return data[key];
}

const FIELD_VALUES = {
  'metadata.name': 'corral-pod-0',
  'metadata.namespace': 'corral',
  'spec.nodeName': 'machine-1',
  'spec.serviceAccountName': 'default',
  'status.podIP': '10.0.0.2',
  'status.hostIP': '10.0.0.1',
};

// A container's environment as the kubelet would give it: literal values
// (with $(VAR) references expanded), values of the set's Secrets and
// ConfigMaps, stand-ins for the pod's own fields.
export function containerEnv(objects, container) {
  const env = {};
  for (const from of container.envFrom ?? []) {
    const ref = from.secretRef ?? from.configMapRef;
    const o = find(objects, from.secretRef ? 'Secret' : 'ConfigMap', ref?.name);
    if (!o) continue;
    const data = from.secretRef ? secretData(o) : o.data ?? {};
    for (const [k, v] of Object.entries(data)) env[(from.prefix ?? '') + k] = v;
  }
  for (const e of container.env ?? []) {
    if (e.value !== undefined) {
      env[e.name] = e.value.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, v) => env[v] ?? m);
    } else if (e.valueFrom?.secretKeyRef) {
      env[e.name] = refValue(objects, 'Secret', e.valueFrom.secretKeyRef.name, e.valueFrom.secretKeyRef.key);
    } else if (e.valueFrom?.configMapKeyRef) {
      env[e.name] = refValue(objects, 'ConfigMap', e.valueFrom.configMapKeyRef.name, e.valueFrom.configMapKeyRef.key);
    } else if (e.valueFrom?.fieldRef) {
      env[e.name] = FIELD_VALUES[e.valueFrom.fieldRef.fieldPath] ?? 'x';
    } else {
      env[e.name] = '1';
    }
    if (env[e.name] === undefined) delete env[e.name];
  }
  return env;
}

// The file a container reads at an absolute path, when a ConfigMap volume
// provides it: {configMap, key, text}, or null.
export function fileFromConfigMap(objects, podSpec, container, file) {
  for (const m of container.volumeMounts ?? []) {
    const dir = m.mountPath.replace(/\/+$/, '');
    if (!file.startsWith(`${dir}/`)) continue;
    const vol = (podSpec.volumes ?? []).find((v) => v.name === m.name);
    if (!vol?.configMap) continue;
    const inside = path.posix.join(m.subPath ?? '', file.slice(dir.length + 1));
    const item = vol.configMap.items?.find((i) => i.path === inside);
    const key = vol.configMap.items ? item?.key : inside;
    const cm = find(objects, 'ConfigMap', vol.configMap.name);
    if (key !== undefined && cm?.data?.[key] !== undefined) return { configMap: cm, key, text: cm.data[key] };
  }
  return null;
}

// The mount of a container that holds an absolute path (the deepest one),
// with its volume: {mount, volume}, or null.
export function mountOf(podSpec, container, file) {
  let best = null;
  for (const m of container.volumeMounts ?? []) {
    const dir = m.mountPath.replace(/\/+$/, '') || '/';
    if (file === dir || file.startsWith(dir === '/' ? '/' : `${dir}/`)) {
      if (!best || dir.length > best.mount.mountPath.length) {
        best = { mount: m, volume: (podSpec.volumes ?? []).find((v) => v.name === m.name) };
      }
    }
  }
  return best;
}

// "30s", "1m", "500ms", "1h", or a bare number of seconds: seconds, or NaN.
export function seconds(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(String(text).trim());
  if (!m) return NaN;
  return Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600, undefined: 1 }[m[2]];
}

// Every "os.environ/NAME" value in a parsed configuration: [{where, name}].
export function environRefs(value, where = '') {
  if (typeof value === 'string') {
    const m = /^os\.environ\/(.*)$/.exec(value);
    return m ? [{ where: where || '/', name: m[1] }] : [];
  }
  if (value && typeof value === 'object') {
    return Object.entries(value).flatMap(([k, v]) => environRefs(v, `${where}/${k}`));
  }
  return [];
}

// --------------------------------------------------------------- Containerfile

// The instructions of a Containerfile: [{line, cmd, text, stage}], with
// continuation lines joined and comment lines dropped, and its stages:
// [{name, from, index, instructions}].
export function readContainerfile(file = CONTAINERFILE) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const instructions = [];
  let current = null;
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (line.startsWith('#') || (!line && !current)) return;
    if (!current) current = { line: i + 1, text: '' };
    if (line.endsWith('\\')) {
      current.text += `${line.slice(0, -1).trim()} `;
      return;
    }
    current.text += line;
    const m = /^(\S+)\s*(.*)$/.exec(current.text.trim());
    instructions.push({ line: current.line, cmd: m[1].toUpperCase(), text: m[2] });
    current = null;
  });
  const stages = [];
  for (const ins of instructions) {
    if (ins.cmd === 'FROM') {
      const m = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*$/i.exec(ins.text);
      stages.push({ from: m?.[1], name: m?.[2], index: stages.length, line: ins.line, instructions: [] });
    }
    if (!stages.length) continue;
    ins.stage = stages[stages.length - 1];
    ins.stage.instructions.push(ins);
  }
  return { instructions, stages };
}

// The packages of every `apt-get install` of a stage's RUN instructions.
export function aptPackages(stage) {
  const out = [];
  for (const ins of stage.instructions.filter((i) => i.cmd === 'RUN')) {
    for (const m of ins.text.matchAll(/apt-get\s+install\s+([^;&|]*)/g)) {
      out.push(...m[1].split(/\s+/).filter((w) => w && !w.startsWith('-')));
    }
  }
  return out;
}

// A COPY or ADD instruction's flags, sources and destination.
export function copyParts(ins) {
  let words;
  if (ins.text.trim().startsWith('[')) {
    words = JSON.parse(ins.text);
  } else {
    words = ins.text.split(/\s+/).filter(Boolean);
  }
  const flags = {};
  while (words.length && words[0].startsWith('--')) {
    const [k, v] = words.shift().slice(2).split('=');
    flags[k] = v ?? true;
  }
  return { flags, sources: words.slice(0, -1), dest: words[words.length - 1] };
}

// A JSON-array instruction's words (ENTRYPOINT, CMD), or null.
export function execForm(ins) {
  try {
    const v = JSON.parse(ins.text);
    return Array.isArray(v) && v.every((w) => typeof w === 'string') ? v : null;
  } catch {
    return null;
  }
}

// .dockerignore's patterns as [{exclude, regex}] (the last that matches wins).
export function dockerignore() {
  const file = path.join(REPO, '.dockerignore');
  if (!fs.existsSync(file)) return [];
  const out = [];
  for (const raw of fs.readFileSync(file, 'utf8').split('\n')) {
    let line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const exclude = !line.startsWith('!');
    line = path.posix.normalize(line.replace(/^!/, '').replace(/^\/+/, ''));
    let re = '';
    for (let i = 0; i < line.length; i++) {
      if (line.startsWith('**/', i)) {
        re += '(?:.*/)?';
        i += 2;
      } else if (line.startsWith('**', i)) {
        re += '.*';
        i += 1;
      } else if (line[i] === '*') re += '[^/]*';
      else if (line[i] === '?') re += '[^/]';
      else re += line[i].replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
    out.push({ exclude, regex: new RegExp(`^${re}$`) });
  }
  return out;
}

// Whether .dockerignore leaves a path of the repository out of the build's
// context (a path is out when it, or a folder above it, matches).
export function ignored(rules, p) {
  const parts = p.split('/');
  let out = false;
  for (let i = 1; i <= parts.length; i++) {
    const prefix = parts.slice(0, i).join('/');
    for (const r of rules) if (r.regex.test(prefix)) out = r.exclude;
  }
  return out;
}

export const contextCopies = (stage) => stage.instructions
  .filter((i) => (i.cmd === 'COPY' || i.cmd === 'ADD') && !copyParts(i).flags.from);

// The uid the image's `useradd --uid N` makes, or undefined.
export function imageUid(containerfile = readContainerfile()) {
  const last = containerfile.stages[containerfile.stages.length - 1];
  for (const ins of last?.instructions ?? []) {
    const m = ins.cmd === 'RUN' && /useradd\b[^;&|]*--uid[ =](\d+)/.exec(ins.text);
    if (m) return Number(m[1]);
  }
  return undefined;
}

// ------------------------------------------------------- scripts/install-deps

// The groups of DEBIAN_PACKAGES in scripts/install-deps: [{comment, packages}],
// each group introduced by its comment line.
export function installDepsGroups() {
  const text = fs.readFileSync(path.join(REPO, 'scripts/install-deps'), 'utf8');
  const m = /DEBIAN_PACKAGES=\(\n([\s\S]*?)\n\)/.exec(text);
  if (!m) throw new Error('scripts/install-deps: no DEBIAN_PACKAGES=( ... ) list');
  const groups = [];
  for (const line of m[1].split('\n')) {
    const t = line.trim();
    if (t.startsWith('#')) groups.push({ comment: t.replace(/^#\s*/, ''), packages: [] });
    else if (t) {
      if (!groups.length) groups.push({ comment: '', packages: [] });
      groups[groups.length - 1].packages.push(...t.split(/\s+/));
    }
  }
  return groups;
}

// The targets CMakeLists.txt makes programs of (add_executable).
export function cmakeExecutables() {
  const text = fs.readFileSync(path.join(REPO, 'CMakeLists.txt'), 'utf8');
  return new Set([...text.matchAll(/^\s*add_executable\(\s*([A-Za-z0-9_-]+)/gm)].map((m) => m[1]));
}

// The project's version in CMakeLists.txt.
export function cmakeVersion() {
  const m = /project\(\s*corral\s+VERSION\s+([0-9.]+)/.exec(fs.readFileSync(path.join(REPO, 'CMakeLists.txt'), 'utf8'));
  return m?.[1];
}
