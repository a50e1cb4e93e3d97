// What the conformance scenarios expect of a server, shared by both
// backends: the media payloads, and the elicitation forms of the 2025
// elicitation scenarios (SEP-1034 defaults, SEP-1330 enums).

// A 1x1 PNG and a minimal WAV, as the scenarios expect some image and audio.
export const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
export const WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

export const SEP1034_MESSAGE = "Please review and update the form fields with defaults";
export const SEP1034_SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", description: "User name", default: "John Doe" },
    age: { type: "integer", description: "User age", default: 30 },
    score: { type: "number", description: "User score", default: 95.5 },
    status: { type: "string", description: "User status", enum: ["active", "inactive", "pending"], default: "active" },
    verified: { type: "boolean", description: "Verification status", default: true },
  },
  required: [],
};

export const SEP1330_MESSAGE = "Please select options from the enum fields";
export const SEP1330_SCHEMA = {
  type: "object",
  properties: {
    untitledSingle: { type: "string", description: "Select one option", enum: ["option1", "option2", "option3"] },
    titledSingle: {
      type: "string",
      description: "Select one option with titles",
      oneOf: [
        { const: "value1", title: "First Option" },
        { const: "value2", title: "Second Option" },
        { const: "value3", title: "Third Option" },
      ],
    },
    legacyEnum: {
      type: "string",
      description: "Select one option (legacy)",
      enum: ["opt1", "opt2", "opt3"],
      enumNames: ["Option One", "Option Two", "Option Three"],
    },
    untitledMulti: {
      type: "array",
      description: "Select multiple options",
      minItems: 1,
      maxItems: 3,
      items: { type: "string", enum: ["option1", "option2", "option3"] },
    },
    titledMulti: {
      type: "array",
      description: "Select multiple options with titles",
      minItems: 1,
      maxItems: 3,
      items: {
        anyOf: [
          { const: "value1", title: "First Choice" },
          { const: "value2", title: "Second Choice" },
          { const: "value3", title: "Third Choice" },
        ],
      },
    },
  },
  required: [],
};

export const RESOURCES = [
  { uri: "test://static-text", name: "static-text", title: "Static text", mimeType: "text/plain" },
  { uri: "test://static-binary", name: "static-binary", title: "Static binary", mimeType: "image/png" },
  { uri: "test://watched-resource", name: "watched-resource", title: "Watched", mimeType: "text/plain" },
];

export const TEMPLATES = [
  { uriTemplate: "test://template/{id}/data", name: "template", title: "Data by id", mimeType: "application/json" },
];

export const PROMPTS = [
  { name: "test_simple_prompt", title: "Simple", description: "No arguments" },
  {
    name: "test_prompt_with_arguments",
    description: "Two required arguments",
    arguments: [
      { name: "arg1", description: "First argument", required: true },
      { name: "arg2", description: "Second argument", required: true },
    ],
  },
  {
    name: "test_prompt_with_embedded_resource",
    description: "Embeds the resource it is given",
    arguments: [{ name: "resourceUri", description: "URI to embed", required: true }],
  },
  { name: "test_prompt_with_image", description: "Carries an image" },
];

export const text = (value) => ({ type: "text", text: value });

export function readResource(uri) {
  if (uri === "test://static-text") {
    return [{ uri, mimeType: "text/plain", text: "This is the content of the static text resource." }];
  }
  if (uri === "test://static-binary") {
    return [{ uri, mimeType: "image/png", blob: PNG }];
  }
  if (uri === "test://watched-resource") {
    return [{ uri, mimeType: "text/plain", text: "Watched resource content" }];
  }
  const match = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
  if (match) {
    const id = match[1];
    return [{ uri, mimeType: "application/json", text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }];
  }
  return null;
}

export function getPrompt(name, args) {
  switch (name) {
    case "test_simple_prompt":
      return [{ role: "user", content: text("This is a simple prompt for testing.") }];
    case "test_prompt_with_arguments":
      return [{ role: "user", content: text(`Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`) }];
    case "test_prompt_with_embedded_resource":
      return [
        {
          role: "user",
          content: {
            type: "resource",
            resource: { uri: args.resourceUri, mimeType: "text/plain", text: "Embedded resource content for testing." },
          },
        },
        { role: "user", content: text("Please process the embedded resource above.") },
      ];
    case "test_prompt_with_image":
      return [
        { role: "user", content: { type: "image", data: PNG, mimeType: "image/png" } },
        { role: "user", content: text("Please analyze the image above.") },
      ];
    default:
      return null;
  }
}

/// The answers of the tools whose answer is fixed, by name (undefined for
/// any other tool).
export function staticToolResult(name) {
  switch (name) {
    case "test_simple_text":
      return { content: [text("This is a simple text response for testing.")] };
    case "test_image_content":
      return { content: [{ type: "image", data: PNG, mimeType: "image/png" }] };
    case "test_audio_content":
      return { content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] };
    case "test_embedded_resource":
      return {
        content: [
          {
            type: "resource",
            resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." },
          },
        ],
      };
    case "test_multiple_content_types":
      return {
        content: [
          text("Multiple content types test:"),
          { type: "image", data: PNG, mimeType: "image/png" },
          {
            type: "resource",
            resource: {
              uri: "test://mixed-content-resource",
              mimeType: "application/json",
              text: JSON.stringify({ test: "data", value: 123 }),
            },
          },
        ],
      };
    default:
      return undefined;
  }
}

/// The tools of the 2025 scenarios that ask the client something.
export const QUESTION_TOOLS = [
  {
    name: "test_sampling",
    description: "Asks the client's model to complete a prompt",
    inputSchema: { type: "object", properties: { prompt: { type: "string" } }, required: ["prompt"] },
  },
  {
    name: "test_elicitation",
    description: "Asks the user for a response",
    inputSchema: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
  },
  { name: "test_elicitation_sep1034_defaults", description: "Asks with a default for every primitive", inputSchema: { type: "object", properties: {} } },
  { name: "test_elicitation_sep1330_enums", description: "Asks with every enum form", inputSchema: { type: "object", properties: {} } },
];
