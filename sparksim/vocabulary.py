"""The tokenizer's built-in vocabulary (layer 2 of sparksim/tokenizer.py's design): word
lists written by hand, simple generated inflections, and every built-in piece in id order
(words in four forms, cased words, sub-word pieces, letters, punctuation, whitespace,
digit groups). Deterministic: ids depend only on the order here.
"""

from __future__ import annotations

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


def base_pieces() -> list[str]:
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
