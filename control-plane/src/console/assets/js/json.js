// JSON as the route editor shows it: pretty-printed, with where each JSON pointer sits in the text, so that a
// problem the server reports at `/shards/0/target` is shown on that line.

export const pretty = (value) => JSON.stringify(value, null, 2);

// A syntax error as { message, line, column }, or null when `text` is JSON.
export function syntaxError(text) {
  try {
    JSON.parse(text);
    return null;
  } catch (error) {
    const match = /position (\d+)/.exec(error.message);
    const at = match ? lineColumn(text, Number(match[1])) : { line: 1, column: 1 };
    return { message: error.message.replace(/ in JSON at position.*$/, ''), ...at };
  }
}

export function lineColumn(text, offset) {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  return { line, column: offset - before.lastIndexOf('\n') };
}

const escapePointer = (key) => key.replace(/~/g, '~0').replace(/\//g, '~1');

// Map from every JSON pointer of (valid JSON) `text` to the offset where it starts: a member's key, an array
// item's value.
export function pointers(text) {
  const at = new Map();
  let i = 0;
  const space = () => { while (i < text.length && ' \t\r\n'.includes(text[i])) i++; };
  const string = () => {
    const start = i++;
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const value = (pointer) => {
    space();
    if (!at.has(pointer)) at.set(pointer, i);
    const open = text[i];
    if (open === '{' || open === '[') {
      i++;
      space();
      if (text[i] === (open === '{' ? '}' : ']')) { i++; return; }
      for (let n = 0; ; n++) {
        space();
        if (open === '{') {
          const keyAt = i;
          const child = `${pointer}/${escapePointer(string())}`;
          at.set(child, keyAt);
          space();
          i++; // ':'
          value(child);
        } else {
          value(`${pointer}/${n}`);
        }
        space();
        if (text[i++] !== ',') return;
      }
    }
    if (open === '"') { string(); return; }
    while (i < text.length && !',]} \t\r\n'.includes(text[i])) i++;
  };
  value('');
  return at;
}

// The line of `pointer` in `text`, or of its nearest ancestor there (a missing field is reported at its parent).
export function lineOf(text, pointer) {
  const at = pointers(text);
  let p = pointer;
  while (!at.has(p) && p !== '') p = p.slice(0, p.lastIndexOf('/'));
  return lineColumn(text, at.get(p) || 0).line;
}
