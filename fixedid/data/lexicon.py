"""The built-in language's lexicon: the closed word lists that :mod:`fixedid.data.synthetic` draws from."""

FEMALE = ("Mary Anna Emma Sarah Laura Julia Alice Grace Emily Rachel Helen Clara Lucy Jane Kate Rose Ruth Amy "
           "Ellen Nora Olivia Sophie Lisa Diana Irene Paula Vera Megan Hannah Karen Susan Linda").split()
MALE = ("John David Michael James Robert Thomas Daniel Peter Paul Mark Steven Kevin Brian George Edward Henry "
         "Frank Adam Luke Simon Oscar Victor Jacob Ryan Eric Scott Martin Oliver Arthur Samuel Walter Carl").split()
OPENERS = ("When", "After")
MOTION = ("went", "walked", "ran")
GIVE = ("gave", "handed", "passed", "threw", "sent", "brought")
PLACES = "park store school beach river market garden station library church office lake".split()
OBJECTS = "ball gift drink kite ring pen hat toy map coin".split()
NOUNS = [tuple(p.split(":")) for p in (
    "key:keys cabinet:cabinets box:boxes book:books table:tables door:doors lamp:lamps cup:cups chair:chairs "
    "window:windows letter:letters bottle:bottles picture:pictures coat:coats basket:baskets shelf:shelves "
    "knife:knives bridge:bridges tower:towers car:cars").split()]
ANIMATE = [tuple(p.split(":")) for p in (
    "dog:dogs cat:cats bird:birds horse:horses fox:foxes mouse:mice girl:girls boy:boys child:children "
    "man:men woman:women wolf:wolves rabbit:rabbits goat:goats").split()]
ATTR_PREPS = "to of near behind under beside with".split()
LOC_PREPS = "on under near behind".split()
VERB_PAIRS = (("is", "are"), ("was", "were"), ("looks", "look"), ("seems", "seem"))
ADJS = "red old new small big heavy broken clean dirty green blue warm cold dark bright".split()
ANIM_ADJS = "happy sad tired hungry quiet angry calm old small big".split()
TRANSITIVE = "saw chased fed helped followed heard found watched pushed called".split()
FOODS = "soup bread rice cheese apples honey fish beans pears plums cake pasta eggs nuts".split()
PLURAL_FOODS = frozenset("apples beans pears plums eggs nuts".split())
JOBS = "baker farmer doctor teacher painter pilot singer tailor writer nurse guard cook miner sailor".split()
FIXED_WORDS = ("The the a and to that because he she in as lives likes works words saw walked went "
                "is are was were").split()
# Induction pool: (word, pos, number) for the random word lists.
POOL = ([(w, "NOUN", "sg") for w in OBJECTS] + [(n[0], "NOUN", "sg") for n in NOUNS]
         + [(w, "NOUN", "sg") for w in PLACES] + [(w, "ADJ", "none") for w in ADJS])
POOL_TOKS = [(w, pos, num, -1, 0) for w, pos, num in POOL]

N_ENTITIES = 32
N_CITIES = 12
ONSETS = "b d f g k l m n p r s t v z br dr kr gl th sh".split()
VOWELS = "a e i o u a e o ai or".split()
CODAS = ["", "", "n", "r", "l", "s", "th", "m"]
