// The Node.js versions the service supports: the machines' Node 20 and the
// current LTS, Node 24. CI runs the suite on both; package.json `engines`
// says the same (a test keeps the two in step).
//
// The AWS SDK announces at every client start that its versions published
// after early 2027 will need Node 22 or later. That concerns a future
// upgrade of the SDK, which package-lock.json pins: on a Node we support the
// notice tells an operator nothing they can act on, so we turn it off with
// the SDK's documented switch (AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED,
// aws/aws-sdk-js-v3#7983). A value the operator set is left alone, and on an
// unsupported Node the SDK speaks as usual.

export const SUPPORTED_NODE_MAJORS: readonly number[] = [20, 24];

export const AWS_SDK_NODE_NOTICE_SWITCH = "AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED";

/** The major version of a `process.version` string such as "v20.19.0". */
export function nodeMajor(version: string): number {
  return Number.parseInt(version.replace(/^v/, ""), 10);
}

/** Turns the AWS SDK's Node-version notice off on a supported Node, unless the environment already decides. */
export function quietAwsSdkNodeNotice(env: NodeJS.ProcessEnv = process.env, version: string = process.version): void {
  if (env[AWS_SDK_NODE_NOTICE_SWITCH] !== undefined) return;
  if (SUPPORTED_NODE_MAJORS.includes(nodeMajor(version))) env[AWS_SDK_NODE_NOTICE_SWITCH] = "true";
}
