#!/usr/bin/env node
// validate.js - check Lunar's Kubernetes manifests offline: every YAML
// document against the OpenAPI schema of its kind (kubernetes-models), then
// Lunar's own rules: a daemon listening beyond loopback has --cluster-key,
// the key's Secret is mounted read-only with mode 0400 or 0600, the Lunar
// image is the one this tree builds, a master with --etcd advertises an
// address others can dial (its $(VARS) defined), and more than one master
// replica elects through etcd. Prints one line per document; exit 0
// when all pass, 1 otherwise, 2 on usage.
//
//   node validate.js [--image localhost/lunar:VERSION] FILE.yaml...
'use strict';

const fs = require('fs');
const YAML = require('yaml');

function usage() {
	console.error('usage: validate.js [--image IMAGE] FILE.yaml...');
	process.exit(2);
}

// The model class of apiVersion/kind, e.g. apps/v1 DaemonSet, v1 Service.
function model(apiVersion, kind) {
	if (!/^[a-z0-9.]*\/?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z]+$/.test(kind))
		return null;
	try {
		return require(`kubernetes-models/${apiVersion}/${kind}`)[kind] || null;
	} catch (e) {
		return null;
	}
}

function podSpec(doc) {
	if (doc.kind === 'Pod') return doc.spec;
	return doc.spec && doc.spec.template && doc.spec.template.spec;
}

function flag(argv, name) {
	const i = argv.indexOf(name);
	return i >= 0 ? argv[i + 1] : undefined;
}

const loopback = (a) => a === undefined || a === 'localhost' || /^127\./.test(a) || a === '::1';

// $(VAR) references in s that the container's env does not define (Kubernetes
// would leave them as they are).
function undefinedVars(s, c) {
	const env = new Set((c.env || []).map((e) => e.name));
	return [...(s || '').matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)].map((m) => m[1]).filter((v) => !env.has(v));
}

// A master with --etcd (SPEC §14) advertises tcp://HOST:PORT, HOST from the
// pod (a $(VAR) the container defines) and never a loopback address.
function haRules(argv, c, what) {
	const bad = [];
	if (!argv.includes('--etcd')) return bad;
	const adv = flag(argv, '--advertise');
	if (!adv || !/^tcp:\/\/[^:/]+:[0-9]+$/.test(adv.replace(/\$\([A-Za-z0-9_]+\)/g, 'h')))
		bad.push(`${what}: --etcd needs --advertise tcp://HOST:PORT`);
	else if (/^tcp:\/\/(127\.|localhost|0\.0\.0\.0)/.test(adv))
		bad.push(`${what}: --advertise ${adv}: proxies on other nodes cannot dial it`);
	for (const f of ['--advertise', '--advertise-http', '--etcd'])
		for (const v of undefinedVars(flag(argv, f), c))
			bad.push(`${what}: ${f} uses $(${v}), which the container's env does not define`);
	if (!/^http:\/\//.test(flag(argv, '--etcd') || ''))
		bad.push(`${what}: --etcd wants http://HOST:PORT[,...]`);
	return bad;
}

// Several masters must elect a leader: a Deployment (or StatefulSet) of more
// than one lunar-master replica without --etcd would have two serving.
function replicaRules(doc) {
	const spec = podSpec(doc);
	if (!spec || !doc.spec || !(doc.spec.replicas > 1)) return [];
	return (spec.containers || []).filter((c) => {
		const argv = [...(c.command || []), ...(c.args || [])];
		return argv.some((a) => /(^|\/)lunar-master$/.test(a)) && !argv.includes('--etcd');
	}).map((c) => `container ${c.name}: ${doc.spec.replicas} lunar-master replicas without --etcd (no election)`);
}

function claimNames(doc) {
	return ((doc.spec && doc.spec.volumeClaimTemplates) || []).map((t) => t.metadata && t.metadata.name);
}

// Lunar's rules for one pod spec; returns the problems found.
// claims: the names of a StatefulSet's volumeClaimTemplates (volumes too).
function lunarRules(spec, image, claims) {
	const bad = [];
	const vols = new Map((spec.volumes || []).map((v) => [v.name, v]));
	for (const n of claims || []) vols.set(n, {name: n});
	const all = [...(spec.initContainers || []), ...(spec.containers || [])];

	for (const v of vols.values()) {
		if (!v.secret) continue;
		const mode = v.secret.defaultMode;
		if (mode !== 0o400 && mode !== 0o600)
			bad.push(`secret volume ${v.name}: defaultMode ${mode === undefined ? 'unset (0644)' : '0' + mode.toString(8)}, want 0400 or 0600`);
	}
	for (const c of all) {
		const argv = [...(c.command || []), ...(c.args || [])];
		const what = `container ${c.name}`;

		if (/(^|\/)lunar(:|$)/.test(c.image || '') && image && c.image !== image)
			bad.push(`${what}: image ${c.image}, this tree builds ${image}`);
		for (const m of c.volumeMounts || []) {
			const v = vols.get(m.name);
			if (!v) bad.push(`${what}: mounts ${m.name}, which no volume names`);
			else if (v.secret && !m.readOnly) bad.push(`${what}: secret ${m.name} mounted read-write`);
		}
		const daemon = argv.find((a) => /(^|\/)lunar-(master|proxy)$/.test(a));
		if (!daemon) continue;
		const open = daemon.endsWith('master') ? !loopback(flag(argv, '--listen')) || !argv.includes('--listen')
			: !loopback(flag(argv, '--host'));
		const key = flag(argv, '--cluster-key');
		if (argv.includes('--insecure')) bad.push(`${what}: --insecure`);
		if (open && !key) bad.push(`${what}: ${daemon} reachable beyond loopback without --cluster-key`);
		if (daemon.endsWith('master')) bad.push(...haRules(argv, c, what));
		if (key) {
			const m = (c.volumeMounts || []).find((vm) => key.startsWith(vm.mountPath.replace(/\/?$/, '/')));
			if (!m) bad.push(`${what}: --cluster-key ${key} is on no volume`);
			else if (!m.readOnly) bad.push(`${what}: --cluster-key ${key} on a volume mounted read-write`);
		}
	}
	return bad;
}

function main() {
	const args = process.argv.slice(2);
	let image;
	if (args[0] === '--image') {
		image = args[1];
		args.splice(0, 2);
	}
	if (!args.length) usage();
	let failed = 0, docs = 0;

	for (const file of args) {
		// Kubernetes reads YAML 1.1: 0400 is octal there.
		const parsed = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'), { version: '1.1' });
		for (const d of Array.isArray(parsed) ? parsed : [parsed]) {
			const problems = d.errors.map((e) => `YAML: ${e.message}`);
			const doc = problems.length ? null : d.toJS();
			if (doc === null && !problems.length) continue; // an empty document
			docs++;
			const name = doc ? `${doc.kind}/${doc.metadata && doc.metadata.name}` : '?';
			if (doc) {
				const Model = model(doc.apiVersion, doc.kind);
				if (!Model) {
					problems.push(`no schema for apiVersion ${doc.apiVersion} kind ${doc.kind}`);
				} else {
					try {
						new Model(doc).validate();
					} catch (e) {
						problems.push(`schema: ${e.message}`);
					}
				}
				const spec = podSpec(doc);
				if (spec) problems.push(...lunarRules(spec, image, claimNames(doc)), ...replicaRules(doc));
			}
			if (problems.length) {
				failed++;
				console.log(`FAIL ${file}: ${name}`);
				for (const p of problems) console.log(`  ${p}`);
			} else {
				console.log(`ok   ${file}: ${name}`);
			}
		}
	}
	console.log(`${docs} documents, ${failed} failed`);
	process.exit(failed || !docs ? 1 : 0);
}

main();
