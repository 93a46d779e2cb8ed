/*
 * scrun_gate: a test SPANK plugin for scrun-py (loaded "required" in plugstack.conf).
 *
 * Registers --scrun-gate=WORD.  In allocator context (salloc), init_post_opt fails
 * when WORD is "deny", so the allocation is refused before any job exists.  Any
 * other word, or no option at all, lets every job through.
 */
#include <string.h>

#include <slurm/spank.h>

SPANK_PLUGIN(scrun_gate, 1);

static char gate_word[64];

static int gate_option_cb(int val, const char *optarg, int remote)
{
	(void) val;
	(void) remote;
	if (optarg == NULL || strlen(optarg) >= sizeof(gate_word))
		return -1;
	strcpy(gate_word, optarg);
	return 0;
}

static struct spank_option gate_option = {
	"scrun-gate", "WORD", "\"deny\" refuses the allocation (scrun-py SPANK test)", 1, 0,
	gate_option_cb
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	return spank_option_register(sp, &gate_option) == ESPANK_SUCCESS ? 0 : -1;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	if (spank_context() == S_CTX_ALLOCATOR && strcmp(gate_word, "deny") == 0) {
		slurm_error("scrun_gate: allocation refused by --scrun-gate=deny");
		return -1;
	}
	return 0;
}
