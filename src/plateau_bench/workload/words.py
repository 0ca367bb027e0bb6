"""Common short English words for prompts built without a local tokenizer.

Each is a single token (with its leading space) in the vocabularies of GPT-2/GPT-4, Llama 2/3,
Mistral and Qwen tokenizers, so a text of N space-separated words is close to N tokens whatever
the server runs. Kept lowercase and alphabetic: no punctuation that could merge across words.
"""

from __future__ import annotations

WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "was", "for", "that", "on", "with", "as", "by", "at", "from",
    "his", "her", "they", "this", "had", "not", "are", "but", "have", "one", "which", "were", "all", "she",
    "when", "there", "been", "has", "more", "who", "will", "would", "their", "what", "about", "out", "so",
    "them", "some", "into", "time", "only", "other", "new", "could", "then", "these", "two", "may", "first",
    "any", "like", "now", "my", "such", "over", "our", "man", "me", "even", "most", "made", "after", "also",
    "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well",
    "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good",
    "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "both", "between",
    "life", "being", "under", "never", "day", "same", "another", "know", "while", "last", "might", "us",
    "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take",
    "three", "states", "himself", "few", "house", "use", "during", "without", "again", "place", "around",
    "however", "home", "small", "found", "thought", "went", "say", "part", "once", "general", "high",
    "upon", "school", "every", "does", "got", "united", "left", "number", "course", "war", "until",
    "always", "away", "something", "fact", "water", "though", "less", "public", "put", "think", "almost",
    "hand", "enough", "far", "took", "head", "yet", "government", "system", "better", "set", "told",
    "nothing", "night", "end", "why", "called", "didn", "find", "look", "asked", "going", "later", "knew",
    "point", "next", "program", "city", "business", "give", "group", "toward", "young", "days", "let",
    "room", "president", "side", "social", "given", "present", "several", "order", "national", "second",
    "possible", "rather", "per", "face", "among", "form", "often", "important", "things", "early", "white",
    "case", "john", "become", "large", "big", "need", "four", "within", "felt", "along", "children", "saw",
    "best", "church", "ever", "least", "power", "development", "light", "thing", "family", "seemed", "want",
    "members", "mind", "country", "area", "others", "done", "turned", "although", "open", "god", "service",
    "certain", "kind", "problem", "began", "different", "door", "thus", "help", "means", "sense", "whole",
    "matter", "perhaps", "itself", "york", "times", "law", "human", "line", "above", "name", "example",
    "action", "company", "hands", "local", "show", "five", "history", "whether", "gave", "either", "act",
    "today", "feet", "across", "taken", "past", "quite", "anything", "seen", "having", "death", "week",
    "experience", "body", "word", "half", "really", "field", "car", "words", "already", "themselves",
    "information", "tell", "together", "college", "shall", "money", "period", "held", "keep", "sure",
    "probably", "free", "seems", "real", "behind", "cannot", "miss", "political", "air", "question",
    "making", "office", "brought", "whose", "special", "heard", "major", "problems", "ago", "became",
    "federal", "study", "available", "known", "result", "street", "economic", "boy", "position", "reason",
    "change", "south", "board", "individual", "job", "society", "areas", "west", "close", "turn", "love",
    "community", "true", "court", "force", "full", "seem", "am", "policy", "wife", "future", "age", "voice",
    "center", "woman", "control", "common", "necessary", "following", "front", "sometimes", "six", "girl",
    "clear", "further", "land", "run", "students", "provide", "feel", "party", "able", "mother", "music",
    "education", "university", "child", "effect", "level", "stood", "military", "short", "town", "morning",
    "total", "figure", "private", "son", "class", "art",
)
