"""A deterministic, reversible, dependency-free tokenizer for the simulator.

Why not a real tokenizer: the simulator must start instantly, offline and without
downloading tokenizer files, yet produce token counts that behave like a real
model's (roughly one token per common English word, more for rare words, bytes for
anything exotic) so that prompt lengths, KV-cache pressure and throughput look right.

Design, in three layers:

1. Pre-tokenization. One compiled regex splits text into pieces, like GPT-2's:
   special markers (``<|im_start|>`` ...) first, English contractions (``'s``),
   words with at most one leading space (``" hello"``), digits in groups of up to
   three with at most one leading space (``" 202"``, ``"5"``), runs of punctuation
   with at most one leading space (``" ("``, ``"."``), and whitespace runs. When a
   whitespace run is followed by a non-space character, its final space is left to
   that character, so ``"a   b"`` splits as ``"a" "  " " b"`` and the word keeps
   its usual one-token form.
   The alternatives cover every possible character, so joining the pieces always
   gives the input back (the basis of ``decode(encode(t)) == t``).

2. Vocabulary. Ids 0-255 are the 256 byte values (byte fallback, as in byte-fallback
   BPE). Then come the special tokens, then a fixed, built-in list of pieces in a
   fixed order: ~2,000 common English words (with simple generated inflections,
   ~3,800 in all) in four forms each (``word``, ``" word"``, ``Word``, ``" Word"``),
   acronyms and names that keep their case, single letters and common sub-word
   pieces for the fallback, punctuation and whitespace pieces, and the digit groups
   0-999 with and without a leading space. Last come the pieces of the built-in text
   corpus (``sparksim.corpus``) that the lists above miss, sorted, so everything the
   simulated model "writes" is whole-word tokens (about 18,500 ids in all). An ASCII
   character with no piece of its own (a control character) encodes as its byte id.
   Ids depend only on list order and sorting, never on ``hash()`` or set iteration,
   so they are identical across processes and runs; editing the corpus can only
   move the ids of corpus-only pieces.

3. Encoding. A piece in the vocabulary is one token (one dict lookup, which is what
   makes encode fast: 5-8 million characters a second here). Any other piece is split
   greedily into the longest vocabulary prefixes (so ``" playfulness"`` becomes
   ``" play" "ful" "ness"``), and a character no prefix covers falls back to its
   UTF-8 bytes, one token per byte. Unknown pieces are cached.

Decoding concatenates the bytes of every id and decodes them as UTF-8 once, so
byte-fallback ids that each hold part of a multi-byte character reassemble. Lone
surrogates (legal in a Python ``str``) survive via ``surrogatepass``.

The vocabulary is built lazily on first use because it includes the corpus, and
``sparksim.corpus`` itself imports this module.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
)
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

NUM_BYTE_TOKENS = 256

# --- the built-in word lists -------------------------------------------------------
# Hand-written, deterministic. Order matters only for id assignment.

_FUNCTION_WORDS = """
a an the this that these those there here where when what which who whom whose why how
i me my mine myself you your yours yourself yourselves he him his himself she her hers
herself it its itself we us our ours ourselves they them their theirs themselves one ones
is am are was were be been being have has had having do does did doing done will would
shall should can could may might must ought need dare not no nor yes and or but if then
else so because although though while whereas unless until since as than whether either
neither both each every all any some many much more most few fewer less least several
such own same other another else enough quite rather very too also just only even still
already yet again once twice ever never always often sometimes usually seldom rarely
perhaps maybe almost nearly about above across after against along among around at
before behind below beneath beside besides between beyond by down during except for from
in inside into like near of off on onto out outside over past per through throughout
till to toward towards under underneath unlike up upon via with within without
nothing something anything everything nobody somebody anybody everybody none someone
anyone everyone somewhere anywhere everywhere nowhere whatever whoever whenever wherever
however therefore thus hence meanwhile otherwise instead indeed moreover furthermore
nevertheless nonetheless accordingly consequently namely likewise similarly finally first
second third last next then now today tomorrow yesterday tonight soon later early late
ago away back forward ahead apart aside together alone else maybe okay ok oh hello hi
thanks thank please sorry well right left sure certainly really actually probably simply
clearly exactly especially particularly generally mostly mainly partly fully slightly
roughly approximately directly easily quickly slowly carefully immediately recently
currently finally eventually suddenly gradually naturally obviously usually quietly
loudly gently firmly closely widely highly deeply truly freely fairly nearly hardly
don doesn didn isn aren wasn weren haven hasn hadn won wouldn couldn shouldn mustn needn
ain let
"""

_VERBS = """
accept achieve act add adjust admit affect agree aim allow answer appear apply argue
arrange arrive ask assume attach attempt attend avoid balance base bake believe belong
benefit block boil borrow bother breathe brush burn calculate call care carry cause
change charge chase check cheer chop clean clear climb close collect combine compare
compile complain complete compute concern confirm connect consider consist contain
continue control cook copy correct cost count cover crash create cross cycle damage
dance decide declare decrease define delay delete deliver demand depend describe design
destroy detect determine develop die differ disappear discover discuss display divide
doubt download drag dream dress drift drop dry earn edit enable encode decode end enjoy
ensure enter escape estimate evaluate examine exist expand expect explain explore
express extend fail fill finish fit fix flow fold follow force form free fry gather
generate glance grab greet guess handle happen hate head heat help hire hope hurry
identify ignore imagine improve include increase indicate influence inform insist
install intend introduce invent invite involve join joke jump kick kill knock label land
last laugh launch learn lift like limit link list listen live load locate lock look love
manage mark match matter measure melt mention merge mind miss mix move multiply name
need note notice observe obtain occur offer open order organize own paint park pass
paste pause perform pick plan plant play point polish pour practice prefer prepare
present preserve press pretend prevent print process produce promise protect prove
provide publish pull pump punch push question race rain raise reach realize receive
recognize record reduce refer reflect refuse relate relax release rely remain remember
remind remove rent repair repeat replace reply report request require rescue reserve
resolve respond rest restore return reveal review roll rotate rush sail save scale
scan schedule score scratch search seem select serve settle share shift ship shop
shout sign signal smile solve sort sound sow spell spill start stay step stir stop store
stretch study submit succeed suffer suggest supply support suppose surprise switch talk
taste test thank touch tour trace track trade train transfer travel treat trust try
turn type unlock update upgrade use value vary visit wait walk want warm wash waste
watch water wave weigh welcome wipe wish wonder work worry wrap yell train tune render
stream parse query route queue batch cache shard load measure profile benchmark restart
deploy configure monitor allocate evict prefill decode sample tokenize serve scrape
"""

# Verbs whose final consonant doubles before -ed/-ing.
_DOUBLING_WORDS = """
admit drop fit plan ship shop step stop chop grab hug jog knit mop nod pat plot rob rot skip
slip snap swap tap trim wrap commit submit control prefer refer occur stir
"""
_DOUBLING = frozenset(_DOUBLING_WORDS.split())

_IRREGULAR = """
was were been being had did done went gone came come took taken gave given made got
gotten saw seen knew known thought found told said felt left kept held brought bought
built caught taught sent spent lent meant met paid put read ran run sat set stood
understood won lost led fed fled slept swept wept bent dealt dug drew drawn drove driven
ate eaten fell fallen flew flown forgot forgotten froze frozen grew grown hid hidden hung
heard hit hurt laid lay lit let rode ridden rang rung rose risen sang sung sank sunk
shook shaken shot shown showed shut spoke spoken spun split spread sprang stole stolen
stuck struck strung swore sworn swam swum threw thrown tore torn wore worn woke woken
wrote written became begun began bit bitten blew blown broke broken chose chosen cost
cut quit bet burst cast beat beaten forgave forgiven overcame understood withdrew
go goes going come comes coming take takes taking give gives giving make makes making
get gets getting see sees seeing know knows knowing think thinks thinking find finds
finding tell tells telling say says saying feel feels feeling leave leaves leaving keep
keeps keeping hold holds holding bring brings bringing buy buys buying build builds
building catch catches catching teach teaches teaching send sends sending spend spends
spending mean means meaning meet meets meeting pay pays paying read reads reading run
runs running sit sits sitting stand stands standing understand understands understanding
win wins winning lose loses losing lead leads leading sleep sleeps sleeping write writes
writing become becomes becoming begin begins beginning break breaks breaking choose
chooses choosing cut cuts cutting draw draws drawing drive drives driving eat eats
eating fall falls falling fly flies flying forget forgets forgetting grow grows growing
hear hears hearing hit hits hitting let lets letting lie lies lying ride rides riding
rise rises rising sing sings singing speak speaks speaking spin spins spinning throw
throws throwing wear wears wearing wake wakes waking swim swims swimming shine shines
shining sink sinks sinking set sets setting put puts putting seek seeks seeking sought
fight fights fighting fought bear bears bearing bore born
"""

_NOUNS = """
time year day week month hour minute second moment night morning evening afternoon
people person man woman child children men women family friend group team company
world country city town village state nation government law history story art music
film book page paper letter word words sentence paragraph line name number part place
home house room door window wall floor roof table chair bed kitchen garden yard field
farm forest tree trees leaf leaves flower flowers plant plants seed seeds soil root roots
grass river lake sea ocean water wave waves shore beach island mountain hill valley rock
stone sand wind rain snow storm cloud clouds sky sun moon star stars planet planets
earth space light dark shadow fire heat air weather season spring summer autumn winter
fall food meal bread butter flour salt sugar oil egg eggs milk cheese rice soup pot pan
oven knife fork spoon plate bowl cup glass tea coffee fruit apple onion garlic tomato
tomatoes potato potatoes pepper herb herbs spice spices sauce recipe dish dinner lunch
breakfast boat ship sail sails mast hull deck crew harbor port course chart compass
anchor rope knot tide current island coast lighthouse engine motor car road street
bridge train station bus bike bicycle wheel path trail map journey trip distance speed
body head face eye eyes hand hands foot feet heart mind voice life health doctor school
student students teacher class lesson question questions answer answers problem problems
idea ideas reason reasons result results example examples fact facts point points case
cases way ways thing things kind sort type types side end start top bottom middle edge
center level step steps rule rules plan plans goal goals task tasks job work worker
business market price money cost value payment bank office shop store customer service
system systems process program programs project projects product products data
information detail details report reports research study science scientist method model
models theory experiment test tests measurement unit units size shape color area volume
weight length width height depth amount rate ratio percent percentage average total
limit limits range scale pattern patterns structure function functions feature features
computer computers machine machines device devices network networks internet web site
server servers client clients user users software hardware code file files folder disk
memory bandwidth processor processors chip chips core cores thread threads clock cycle
cycles bit bits byte bytes kilobyte megabyte gigabyte terabyte register registers cache
caches bus buses transistor transistors circuit circuits signal signals wire wires
power energy battery voltage current heat fan fans board boards card cards screen
keyboard mouse printer camera phone phones message messages email mail text texts
language languages token tokens vocabulary sequence sequences prompt prompts output
outputs input inputs request requests response responses reply queue queues batch
batches layer layers weight weights parameter parameters matrix matrices vector vectors
tensor tensors attention head heads kernel kernels operation operations instruction
instructions compiler library libraries framework frameworks version versions update
updates release releases error errors bug bugs fix fixes log logs metric metrics
dashboard chart charts graph graphs table tables column columns row rows record records
database query queries key keys index indexes list lists array arrays string strings
object objects class classes method methods variable variables loop loops branch
branches step architecture precision accuracy quality performance throughput latency
efficiency capacity budget usage utilization load benchmark benchmarks baseline
experiment trial trials sample samples context window windows length prefix prefixes
block blocks page pages pool pools slot slots buffer buffers copy copies transfer
transfers stage stages pipeline pipelines scheduler schedulers worker workers engine
engines container containers image images cluster clusters node nodes port ports
history museum library author writer reader readers story stories poem poems song songs
game games sport sports ball player players match race races team teams coach
animal animals bird birds dog dogs cat cats horse horses fish cow sheep bee bees insect
insects nest nests egg wing wings feather feathers song nature garden gardener gardeners
season harvest crop crops vegetable vegetables bean beans pea peas carrot carrots
lettuce squash compost mulch fence shed tool tools hose bucket shovel rake gloves
telescope lens mirror orbit galaxy galaxies comet comets meteor asteroid eclipse
universe astronomer astronomers observatory sky horizon dawn dusk twilight
war peace army king queen emperor empire church temple city cities trade merchant
merchants road roads canal canals railway railways factory factories industry
age era century centuries decade decades generation generations tradition traditions
culture cultures society community communities neighbor neighbors village villages
choice choices chance chances risk risks effect effects cause causes change changes
difference differences decision decisions experience experiences knowledge skill
skills practice habit habits attention care interest interests purpose sense feeling
feelings thought thoughts memory memories dream dreams hope fear joy love peace
truth trust support help advice guide guides manual manuals note notes summary
introduction conclusion chapter chapters section sections title titles topic topics
term terms concept concepts principle principles argument arguments evidence claim
claims source sources reference references citation draft drafts version edition
"""

_ADJECTIVES = """
good better best bad worse worst great big small large little long short high low
new old young early late first last next final main major minor important simple easy
hard difficult possible impossible likely unlikely clear certain sure true false real
full empty open closed free busy ready able whole entire single double common rare
special general specific particular similar different same various certain available
public private local global national international social political economic
personal natural human physical mental strong weak heavy light fast slow quick rapid
hot cold warm cool wet dry clean dirty fresh old bright dark deep shallow wide narrow
thick thin rich poor cheap expensive happy sad calm quiet loud soft gentle rough smooth
sharp flat round square straight curved high safe dangerous healthy sick beautiful
pretty ugly nice kind fair proper correct wrong right left central basic standard
normal usual typical average modern ancient recent current previous future present
past total complete partial exact precise accurate efficient effective useful careful
helpful powerful successful popular famous serious funny strange familiar obvious
visible hidden direct indirect careful patient honest gentle brave proud curious
green blue red yellow white black gray grey brown orange purple golden silver pink
wooden stone metal plastic glass digital physical virtual local remote static dynamic
random fixed stable steady constant variable linear parallel serial sequential
concurrent logical numerical technical scientific practical theoretical historical
original final initial maximum minimum optimal ideal primary secondary dense sparse
large small tiny huge enormous massive compact portable quiet noisy busy idle hungry
thirsty tired awake asleep alive dead wild tame northern southern eastern western
english american european french german chinese japanese
"""

_NUMBER_WORDS = """
zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
eighty ninety hundred thousand million billion trillion half quarter dozen first second
third fourth fifth sixth seventh eighth ninth tenth once twice double triple
"""

# Acronyms and proper nouns that keep their own case.
_CASED_WORDS = """
I I'm GPU GPUs CPU CPUs RAM VRAM HBM LPDDR5X DRAM SRAM SSD NVMe PCIe USB HTTP HTTPS API
APIs JSON YAML HTML CSS SQL URL URLs ID IDs OK AI ML LLM LLMs KV TTFT TPOT ITL FP4 FP8
FP16 BF16 INT4 INT8 NVFP4 MXFP4 CUDA NVIDIA DGX Spark GB10 Grace Blackwell Arm Linux
Docker Python Rust Java JavaScript TypeScript Django PyTorch vLLM Hugging Face Llama
Qwen Mistral Gemma Nemotron OpenAI Prometheus Grafana Redis Postgres Ubuntu GitHub
Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April
May June July August September October November December English Earth Moon Sun Mars
Jupiter Saturn Venus Mercury Neptune Uranus Pluto Milky Way
"""

# Sub-word pieces that let the greedy fallback split rare words into a few pieces
# instead of many bytes. Both with and without a leading space.
_SUBWORDS = """
s es ed d ing er ers est ly y ies ied ion ions tion tions sion ment ments ness able ible
al ial ity ize ise ized ised izing ous ious ful less ism ist ists ive ative ance ence
ant ent ic ical ish ship hood ward wards un re in im dis pre pro con com de ex en em
non over under out up sub super inter trans multi micro mega giga tera kilo auto co
a b c d e f g h i j k l m n o p q r s t u v w x y z
th ch sh wh ph qu st tr pr br cr dr fr gr pl bl cl fl gl sl sp sc sk sm sn sw tw
an ar as at en er in is it on or ou us ac ad al am ap el et ic id il ir
"""

# Whitespace-separated; the second list is used with a leading space.
_PUNCTUATION = """
. , ! ? : ; ' " ( ) [ ] { } - -- ... / \\ * ** # ## ### ` ``` = == + < > <= >= -> => & % $
@ | ~ ^ _ __ ). ), ); ): .) ." ," ?" !" ". ", '. ', 's 't 're 've 'm 'll 'd
— – … “ ” ‘ ’ ° × · • → ← ≈ ≤ ≥ ± µ € £ ¥
"""
_PUNCTUATION_AFTER_SPACE = """
( [ { " ' - -- — – = == + * / < > & % $ @ | # ## ### ` ``` -> => “ ‘ … ... × ≈ • → ~ : ·
"""
_WHITESPACE = [
    " ", "  ", "   ", "    ", "     ", "      ", "       ", "        ",
    "\n", "\n\n", "\n\n\n", " \n", "\n ", "\n  ", "\n   ", "\n    ", "\n        ",
    "\t", "\t\t", "\n\t", "\n\t\t", "\r\n", "\r\n\r\n",
]  # fmt: skip


def _words(block: str) -> list[str]:
    return block.split()


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if len(word) > 1 and word[-1] == "y" and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _past(word: str) -> str:
    if word in _DOUBLING:
        return word + word[-1] + "ed"
    if word.endswith("e"):
        return word + "d"
    if len(word) > 1 and word[-1] == "y" and word[-2] not in "aeiou":
        return word[:-1] + "ied"
    return word + "ed"


def _gerund(word: str) -> str:
    if word in _DOUBLING:
        return word + word[-1] + "ing"
    if word.endswith("ie"):
        return word[:-2] + "ying"
    if word.endswith("e") and not word.endswith(("ee", "ye", "oe")):
        return word[:-1] + "ing"
    return word + "ing"


def _base_pieces() -> list[str]:
    """Every built-in vocabulary piece, in id order, duplicates allowed (removed later)."""
    lowercase: list[str] = []
    lowercase += _words(_FUNCTION_WORDS)
    for verb in _words(_VERBS):
        lowercase += [verb, _plural(verb), _past(verb), _gerund(verb)]
    lowercase += _words(_IRREGULAR)
    for noun in _words(_NOUNS):
        lowercase += [noun, _plural(noun)]
    lowercase += _words(_ADJECTIVES)
    lowercase += _words(_NUMBER_WORDS)

    pieces: list[str] = []
    for word in lowercase:
        capital = word[0].upper() + word[1:]
        pieces += [word, " " + word, capital, " " + capital]
    for word in _words(_CASED_WORDS):
        pieces += [word, " " + word]
    for sub in _words(_SUBWORDS):
        pieces += [sub, " " + sub]
    for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        pieces += [letter, " " + letter]
    pieces += _words(_PUNCTUATION)
    pieces += [" " + p for p in _words(_PUNCTUATION_AFTER_SPACE)]
    pieces += _WHITESPACE
    for n in range(1000):
        pieces += [str(n), " " + str(n)]
    return pieces


# --- pre-tokenization ---------------------------------------------------------------

_SPECIAL_ALT = "|".join(re.escape(s) for s in SPECIAL_TOKENS)
_PIECE_RE = re.compile(
    "|".join(
        (
            _SPECIAL_ALT,
            r"'(?:s|t|re|ve|m|ll|d)",
            r" ?[^\W\d_]+",
            r" ?\d{1,3}",
            # A punctuation run stops in front of a special marker so that the marker
            # stays one token even when glued to punctuation.
            rf" ?(?:(?!{_SPECIAL_ALT})(?:[^\s\w]|_))+",
            r"\s+(?= \S)",
            r"\s+",
        )
    )
)


def pre_tokenize(text: str) -> list[str]:
    """Split ``text`` into pieces; ``"".join(pre_tokenize(t)) == t`` for any string."""
    return _PIECE_RE.findall(text)


def _to_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class Tokenizer:
    """Byte-fallback word-level tokenizer; see the module docstring for the design."""

    _UNKNOWN_CACHE_LIMIT = 100_000
    _CACHE_PIECE_MAX_LEN = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._piece_to_id: dict[str, int] | None = None
        self._id_to_bytes: list[bytes] = []
        self._id_to_text: list[str] = []
        self._prefixes: frozenset[str] = frozenset()
        self._unknown_cache: dict[str, tuple[int, ...]] = {}

    # -- vocabulary -------------------------------------------------------------------

    def _vocab(self) -> dict[str, int]:
        vocab = self._piece_to_id
        if vocab is None:
            with self._lock:
                vocab = self._piece_to_id
                if vocab is None:
                    vocab = self._build()
        return vocab

    def _build(self) -> dict[str, int]:
        # Imported here, not at the top: sparksim.corpus imports this module.
        from sparksim import corpus

        id_to_text: list[str] = []
        id_to_bytes: list[bytes] = []
        piece_to_id: dict[str, int] = {}
        for b in range(NUM_BYTE_TOKENS):
            id_to_bytes.append(bytes([b]))
            # Bytes >= 0x80 are partial UTF-8 on their own: no text of their own.
            id_to_text.append(chr(b) if b < 0x80 else "")

        def add(piece: str) -> None:
            if piece in piece_to_id:
                return
            piece_to_id[piece] = len(id_to_text)
            id_to_text.append(piece)
            id_to_bytes.append(_to_bytes(piece))

        for special in SPECIAL_TOKENS:
            add(special)
        for piece in _base_pieces():
            add(piece)
        # Sorted so that the ids do not depend on the order of the corpus paragraphs.
        # Each word also gets its form with (or without) a leading space: a stream may
        # start on a word that the corpus only has mid-sentence, and vice versa.
        found = {piece for text in corpus.all_texts() for piece in pre_tokenize(text)}
        words = {p.lstrip(" ") for p in found if p.lstrip(" ")[:1].isalpha()}
        found |= words | {" " + w for w in words}
        corpus_pieces = sorted(found)
        for piece in corpus_pieces:
            add(piece)
        # Any other single ASCII character (control characters, mostly) is its byte id:
        # encoding it never needs the fallback path, and the id decodes on its own.
        for b in range(0x80):
            piece_to_id.setdefault(chr(b), b)

        self._id_to_text = id_to_text
        self._id_to_bytes = id_to_bytes
        # Every prefix of every piece: the fallback stops searching as soon as its
        # candidate is no longer the start of any piece.
        self._prefixes = frozenset(p[:k] for p in piece_to_id for k in range(1, len(p) + 1))
        # Published last: other threads read _piece_to_id without the lock.
        self._piece_to_id = piece_to_id
        return piece_to_id

    @property
    def vocab_size(self) -> int:
        self._vocab()
        return len(self._id_to_text)

    def special_id(self, token: str) -> int:
        """The id of a special marker such as ``<|im_end|>``."""
        if token not in SPECIAL_TOKENS:
            raise KeyError(f"not a special token: {token!r}")
        return self._vocab()[token]

    def piece_id(self, piece: str) -> int | None:
        """The id of ``piece`` when it is a single vocabulary entry, else ``None``."""
        return self._vocab().get(piece)

    # -- encode / decode --------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        vocab = self._vocab()
        get = vocab.get
        ids: list[int] = []
        append = ids.append
        for piece in _PIECE_RE.findall(text):
            tid = get(piece)
            if tid is None:
                ids.extend(self._encode_unknown(piece))
            else:
                append(tid)
        return ids

    def _encode_unknown(self, piece: str) -> tuple[int, ...]:
        cached = self._unknown_cache.get(piece)
        if cached is not None:
            return cached
        get = self._vocab().get
        prefixes = self._prefixes
        out: list[int] = []
        i, n = 0, len(piece)
        while i < n:
            # Greedy longest vocabulary prefix, found by extending the candidate while
            # it still starts some piece (linear even for a megabyte without spaces).
            best_end, best_id = i, -1
            j = i + 1
            while j <= n and piece[i:j] in prefixes:
                tid = get(piece[i:j])
                if tid is not None:
                    best_end, best_id = j, tid
                j += 1
            if best_id >= 0:
                out.append(best_id)
                i = best_end
            else:
                # No piece starts here: the character's UTF-8 bytes, one id per byte.
                out.extend(_to_bytes(piece[i]))
                i += 1
        result = tuple(out)
        # Long pieces are rarely repeated; caching them would only hold memory.
        if len(piece) <= self._CACHE_PIECE_MAX_LEN:
            if len(self._unknown_cache) >= self._UNKNOWN_CACHE_LIMIT:
                self._unknown_cache.clear()
            self._unknown_cache[piece] = result
        return result

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: Iterable[int]) -> str:
        self._vocab()
        table = self._id_to_bytes
        ids = list(ids)
        # A negative index would silently pick from the end of the table.
        if ids and min(ids) < 0:
            raise ValueError(f"token id out of range 0..{len(table) - 1}")
        try:
            data = b"".join([table[i] for i in ids])
        except (IndexError, TypeError) as exc:
            raise ValueError(f"token id out of range 0..{len(table) - 1}") from exc
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            # Arbitrary id sequences (not produced by encode) can hold invalid UTF-8.
            return data.decode("utf-8", "replace")

    def token_text(self, token_id: int) -> str:
        """The text of one id; ``""`` for a byte id >= 0x80 (part of a character)."""
        self._vocab()
        if token_id < 0 or token_id >= len(self._id_to_text):
            raise ValueError(f"token id out of range: {token_id}")
        return self._id_to_text[token_id]

    def is_byte_fallback(self, token_id: int) -> bool:
        return 0 <= token_id < NUM_BYTE_TOKENS


# --- chat template ------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                texts.append(str(part.get("text", "")))
            # Other part types (images, audio) carry no text for this model.
        # vLLM joins the text parts of one message with newlines.
        return "\n".join(texts)
    raise TypeError(f"message content must be a string or a list of parts, not {content!r}")


def apply_chat_template(
    messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True
) -> str:
    """ChatML, as Qwen-style models use: ``<|im_start|>{role}\\n{content}<|im_end|>\\n``.

    With ``add_generation_prompt`` the text ends in ``<|im_start|>assistant\\n`` so the
    model's reply follows directly. The markers encode as single special tokens.
    """
    parts: list[str] = []
    for message in messages:
        role = str(message.get("role", "user"))
        content = _content_text(message.get("content"))
        parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


DEFAULT_TOKENIZER = Tokenizer()
